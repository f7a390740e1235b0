#include "ir/assign_signature.hpp"

#include <cstring>

#include "core/storage.hpp"

namespace flexkit::ir {

namespace {

// Alignment classes up to the 16 bytes a vector access needs.
std::int64_t alignment_of(const Array& a) {
  return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(a.data()) % 16);
}

void put_layout(std::vector<std::int64_t>& w, const Array& a) {
  w.push_back(static_cast<std::int64_t>(a.dtype()));
  w.push_back(static_cast<std::int64_t>(a.shape().size()));
  for (std::int64_t e : a.shape()) w.push_back(e);
  for (std::int64_t e : a.strides()) w.push_back(e);
  w.push_back(alignment_of(a));
}

// The same view as make_plan's operand de-duplication sees it (before broadcasting).
bool same_leaf(const Array& a, const Array& b) {
  return a.shares_storage(b) && a.dtype() == b.dtype() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides();
}

class Signer {
 public:
  Signer(const Array& out, AssignSignature& s) : out_(out), device_(out.device()), s_(s) {}

  bool walk(const Node& node) {
    auto& w = s_.words;
    w.push_back(static_cast<std::int64_t>(node.op));
    if (node.op == Op::operand) return leaf(node.array);
    if (node.op == Op::scalar) {
      std::int64_t slot = -1;
      for (std::size_t i = 0; i < s_.scalars.size() && slot < 0; ++i)
        if (std::memcmp(&s_.scalars[i], &node.value, sizeof node.value) == 0)
          slot = static_cast<std::int64_t>(i);
      if (slot < 0) {
        slot = static_cast<std::int64_t>(s_.scalars.size());
        s_.scalars.push_back(node.value);
      }
      w.push_back(slot);
      return true;
    }
    if (op_info(node.op).kind == OpKind::reduction) w.push_back(node.axis);
    w.push_back(static_cast<std::int64_t>(node.args.size()));
    for (const NodePtr& a : node.args)
      if (!walk(*a)) return false;
    return true;
  }

 private:
  bool leaf(const Array& a) {
    if (!a.defined() || a.device() != device_) return false;
    if (a.shares_storage(out_)) {
      if (out_.dtype() == DType::flex16 || !same_leaf(a, out_)) return false;
      s_.reads_out = true;
    }
    std::int64_t slot = -1;
    for (std::size_t i = 0; i < s_.operands.size() && slot < 0; ++i)
      if (same_leaf(*s_.operands[i], a)) slot = static_cast<std::int64_t>(i);
    s_.words.push_back(slot);
    if (slot >= 0) return true;
    s_.operands.push_back(&a);
    put_layout(s_.words, a);
    return true;
  }

  const Array& out_;
  Device device_;
  AssignSignature& s_;
};

}  // namespace

bool sign_assignment(const Array& out, const NodePtr& root, const AssignOptions& options,
                     AssignSignature& s) {
  s.words.clear();
  s.operands.clear();
  s.scalars.clear();
  s.reads_out = false;
  if (!out.defined() || !out.writable() || out.size() == 0) return false;
  const bool flex = out.dtype() == DType::flex16;
  if (flex && options.iwl_policy == IwlPolicy::exact) return false;
  const Device device = out.device();
  s.words.push_back(static_cast<std::int64_t>(device.kind));
  s.words.push_back(device.index);
  put_layout(s.words, out);
  s.words.push_back(flex && options.rounding == Rounding::stochastic);
  if (!Signer(out, s).walk(*root)) return false;
  // Whether out is read decides whether a fused plan may run in place.
  s.words.push_back(s.reads_out);
  return true;
}

}  // namespace flexkit::ir
