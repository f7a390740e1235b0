// Where an array lives: the host, or CUDA device N.
#pragma once
#include <string>
#include <string_view>

namespace flexkit {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  // "cpu", "cuda", "cuda:1"; throws DeviceError for anything else.
  static Device parse(std::string_view text);

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace flexkit
