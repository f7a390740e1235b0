#include "nn/train/checkpoint.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/text.hpp"
#include "flexkit/error.hpp"
#include "nn/io/atomic_file.hpp"

namespace flexkit::nn {

using flexkit::detail::cat;

namespace {

constexpr char kMagic[12] = {'F', 'L', 'E', 'X', 'K', 'I', 'T', 'C', 'K', 'P', 'T', '\n'};

class Writer {
 public:
  void bytes(const void* p, std::size_t n) { out_.append(static_cast<const char*>(p), n); }
  template <class T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  void text(const std::string& s) {
    pod<std::uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void array(const Array& a) {
    pod<std::uint32_t>(static_cast<std::uint32_t>(a.rank()));
    for (std::int64_t d : a.shape()) pod<std::int64_t>(d);
    // flex16 values are exact in f32; with their iwl they encode back to the same mantissas.
    const bool flex = a.dtype() == DType::flex16;
    pod<std::uint8_t>(flex ? 1 : 0);
    pod<std::int32_t>(flex ? a.iwl() : 0);
    const std::vector<float> v = a.to_floats();
    bytes(v.data(), v.size() * sizeof(float));
  }
  std::string& data() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& data, std::string path, std::uint32_t version)
      : data_(data), path_(std::move(path)), version_(version) {}
  void bytes(void* p, std::size_t n) {
    if (n > data_.size() - at_) truncated();
    std::memcpy(p, data_.data() + at_, n);
    at_ += n;
  }
  template <class T>
  T pod() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string text() {
    const auto n = pod<std::uint64_t>();
    if (n > data_.size() - at_) truncated();
    std::string s = data_.substr(at_, n);
    at_ += n;
    return s;
  }
  Array array() {
    const auto rank = pod<std::uint32_t>();
    if (rank > 8)
      throw FormatError(cat(path_, ": corrupt checkpoint (an array of rank ", rank, ")"));
    Shape shape(rank);
    std::int64_t count = 1;
    for (auto& d : shape) {
      d = pod<std::int64_t>();
      if (d < 0 || (d > 0 && count > (std::int64_t{1} << 40) / d))
        throw FormatError(cat(path_, ": corrupt checkpoint (a bad array dimension)"));
      count *= d;
    }
    bool flex = false;
    int iwl = 0;
    if (version_ >= 2) {
      flex = pod<std::uint8_t>() != 0;
      iwl = pod<std::int32_t>();
      if (flex && (iwl < kFlex16MinIwl || iwl > kFlex16MaxIwl))
        throw FormatError(cat(path_, ": corrupt checkpoint (a flex16 array at iwl ", iwl, ")"));
    }
    std::vector<float> v(static_cast<std::size_t>(count));
    bytes(v.data(), v.size() * sizeof(float));
    if (!flex) return Array::from_vector(v, shape);
    return Array::from_floats(v, shape, DType::flex16, Device::cpu(), {.iwl = iwl});
  }
  [[noreturn]] void truncated() const {
    throw FormatError(cat(path_, ": truncated checkpoint (", data_.size(), " bytes)"));
  }

 private:
  const std::string& data_;
  std::string path_;
  std::uint32_t version_;
  std::size_t at_ = 0;
};

}  // namespace

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.pod<std::uint32_t>(kCheckpointVersion);
  w.pod<std::uint64_t>(c.config_hash);
  w.text(c.config_text);
  w.pod<std::int64_t>(c.epochs_done);
  w.pod<std::int64_t>(c.global_step);
  w.pod<std::uint64_t>(c.rng_states.size());
  for (std::uint64_t s : c.rng_states) w.pod(s);
  w.pod<std::uint64_t>(c.parameters.size());
  for (const auto& [name, a] : c.parameters) {
    w.text(name);
    w.array(a);
  }
  w.text(c.optimizer);
  w.pod<std::int64_t>(c.optimizer_steps);
  w.pod<std::uint64_t>(c.optimizer_state.size());
  for (const Array& a : c.optimizer_state) w.array(a);
  w.pod<std::uint64_t>(c.history.size());
  for (const EpochRecord& e : c.history) {
    w.pod(e.epoch);
    for (double v : {e.train_loss, e.train_accuracy, e.test_loss, e.test_accuracy, e.lr, e.seconds})
      w.pod(v);
  }
  w.pod(c.best_test_accuracy);
  w.pod<std::uint64_t>(c.published.size());
  for (const auto& [name, a] : c.published) {
    w.text(name);
    w.array(a);
  }
  w.pod<std::uint64_t>(c.managers.size());
  for (const Checkpoint::Manager& m : c.managers) {
    w.text(m.name);
    w.pod<std::uint8_t>(static_cast<std::uint8_t>(m.tensor_class));
    w.pod(m.state);
  }
  w.pod<std::uint64_t>(fnv1a(w.data().data(), w.data().size()));

  detail::AtomicFile file(path, "cannot write checkpoint");
  file.write(w.data());
  file.commit();
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(cat("cannot open checkpoint ", path, ": ", std::strerror(errno)));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < sizeof kMagic || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    throw FormatError(cat(path, ": not a flexkit checkpoint (bad magic)"));
  if (data.size() < sizeof kMagic + 4 + 8 + 8)
    throw FormatError(cat(path, ": truncated checkpoint (", data.size(), " bytes)"));
  std::uint32_t version = 0;
  std::memcpy(&version, data.data() + sizeof kMagic, 4);
  if (version < 1 || version > kCheckpointVersion)
    throw FormatError(cat(path, ": checkpoint format version ", version,
                          "; this flexkit reads versions 1 to ", kCheckpointVersion));
  std::uint64_t stored = 0;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  if (fnv1a(data.data(), data.size() - 8) != stored)
    throw FormatError(
        cat(path, ": checkpoint checksum mismatch (the file is corrupt or truncated)"));
  const std::string body = data.substr(0, data.size() - 8);
  Reader r(body, path, version);
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic);
  (void)r.pod<std::uint32_t>();
  Checkpoint c;
  c.config_hash = r.pod<std::uint64_t>();
  c.config_text = r.text();
  c.epochs_done = r.pod<std::int64_t>();
  c.global_step = r.pod<std::int64_t>();
  const auto rngs = r.pod<std::uint64_t>();
  if (rngs > 1u << 20) r.truncated();
  for (std::uint64_t i = 0; i < rngs; ++i) c.rng_states.push_back(r.pod<std::uint64_t>());
  const auto params = r.pod<std::uint64_t>();
  if (params > 1u << 20) r.truncated();
  for (std::uint64_t i = 0; i < params; ++i) {
    std::string name = r.text();
    c.parameters.emplace_back(std::move(name), r.array());
  }
  c.optimizer = r.text();
  c.optimizer_steps = r.pod<std::int64_t>();
  const auto states = r.pod<std::uint64_t>();
  if (states > 1u << 20) r.truncated();
  for (std::uint64_t i = 0; i < states; ++i) c.optimizer_state.push_back(r.array());
  const auto epochs = r.pod<std::uint64_t>();
  if (epochs > 1u << 20) r.truncated();
  for (std::uint64_t i = 0; i < epochs; ++i) {
    EpochRecord e;
    e.epoch = r.pod<std::int64_t>();
    for (double* v :
         {&e.train_loss, &e.train_accuracy, &e.test_loss, &e.test_accuracy, &e.lr, &e.seconds})
      *v = r.pod<double>();
    c.history.push_back(e);
  }
  c.best_test_accuracy = r.pod<double>();
  if (version >= 2) {
    const auto published = r.pod<std::uint64_t>();
    if (published > 1u << 20) r.truncated();
    for (std::uint64_t i = 0; i < published; ++i) {
      std::string name = r.text();
      c.published.emplace_back(std::move(name), r.array());
    }
    const auto managers = r.pod<std::uint64_t>();
    if (managers > 1u << 20) r.truncated();
    for (std::uint64_t i = 0; i < managers; ++i) {
      Checkpoint::Manager m;
      m.name = r.text();
      const auto tensor_class = r.pod<std::uint8_t>();
      if (tensor_class > static_cast<std::uint8_t>(TensorClass::optimizer_state))
        throw FormatError(
            cat(path, ": corrupt checkpoint (a tensor class ", int{tensor_class}, ")"));
      m.tensor_class = static_cast<TensorClass>(tensor_class);
      m.state = r.pod<portable::AutoflexState>();
      c.managers.push_back(std::move(m));
    }
  }
  return c;
}

std::map<std::string, std::string> parse_config_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace flexkit::nn
