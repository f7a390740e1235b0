// Architecture strings: "conv(128, 3, padding=1, bias=false) bn sn maxpool(2) flatten ...".
#include <algorithm>
#include <cctype>
#include <charconv>

#include "nn/layer_support.hpp"

namespace flexkit::nn {

using namespace detail;

namespace {

struct Argument {
  std::string key;  // empty for positional
  std::string value;
  std::size_t position = 0;
};

struct LayerSpec {
  std::string name;
  std::vector<Argument> args;
  std::size_t position = 0;  // 1-based column of the name
  std::string text;
};

[[noreturn]] void parse_error(std::string_view text, std::size_t position,
                              const std::string& what) {
  throw ValueError(cat("architecture string, position ", position, ": ", what, "\n  ", text, "\n  ",
                       std::string(position > 0 ? position - 1 : 0, ' '), "^"));
}

std::vector<LayerSpec> tokenize(std::string_view text) {
  std::vector<LayerSpec> layers;
  std::size_t i = 0;
  auto is_separator = [](char c) {
    return std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == '-' || c == '|';
  };
  while (i < text.size()) {
    if (is_separator(text[i])) {
      ++i;
      continue;
    }
    LayerSpec spec;
    spec.position = i + 1;
    const std::size_t start = i;
    while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_'))
      spec.name += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i++])));
    if (spec.name.empty())
      parse_error(text, i + 1, cat("expected a layer name, found '", text[i], "'"));
    while (i < text.size() && text[i] == ' ') ++i;
    if (i < text.size() && text[i] == '(') {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
        if (i < text.size() && text[i] == ')') {
          ++i;
          closed = true;
          break;
        }
        Argument arg;
        arg.position = i + 1;
        std::string word;
        while (i < text.size() && text[i] != ',' && text[i] != ')' && text[i] != '=')
          word += text[i++];
        if (i < text.size() && text[i] == '=') {
          ++i;
          arg.key = std::string(word);
          while (!arg.key.empty() && std::isspace(static_cast<unsigned char>(arg.key.back())))
            arg.key.pop_back();
          word.clear();
          while (i < text.size() && text[i] != ',' && text[i] != ')') word += text[i++];
        }
        while (!word.empty() && std::isspace(static_cast<unsigned char>(word.back())))
          word.pop_back();
        while (!word.empty() && std::isspace(static_cast<unsigned char>(word.front())))
          word.erase(word.begin());
        if (word.empty()) parse_error(text, arg.position, "expected an argument");
        arg.value = word;
        spec.args.push_back(arg);
        if (i < text.size() && text[i] == ',') ++i;
      }
      if (!closed)
        parse_error(text, spec.position, cat("'(' after '", spec.name, "' is never closed"));
    }
    spec.text = std::string(text.substr(start, i - start));
    layers.push_back(std::move(spec));
  }
  if (layers.empty()) throw ValueError("architecture string is empty");
  return layers;
}

class ArgReader {
 public:
  ArgReader(std::string_view text, const LayerSpec& spec, std::vector<std::string> names)
      : text_(text), spec_(spec), names_(std::move(names)) {
    std::size_t positional = 0;
    for (std::size_t a = 0; a < spec.args.size(); ++a) {
      const Argument& arg = spec.args[a];
      if (arg.key.empty()) {
        if (positional >= names_.size())
          parse_error(
              text_, arg.position,
              cat(spec.name, " takes at most ", names_.size(), " arguments (", list(), ")"));
        slot_.emplace_back(names_[positional++], a);
      } else {
        if (std::find(names_.begin(), names_.end(), arg.key) == names_.end())
          parse_error(text_, arg.position,
                      cat(spec.name, " has no argument '", arg.key, "'; it takes: ", list()));
        slot_.emplace_back(arg.key, a);
      }
    }
  }
  const Argument* find(const std::string& name) const {
    for (const auto& [n, a] : slot_)
      if (n == name) return &spec_.args[a];
    return nullptr;
  }
  std::int64_t integer(const std::string& name, std::optional<std::int64_t> fallback) const {
    const Argument* arg = find(name);
    if (!arg) {
      if (!fallback)
        parse_error(text_, spec_.position, cat(spec_.name, " needs its argument '", name, "'"));
      return *fallback;
    }
    std::int64_t v = 0;
    const char* end = arg->value.data() + arg->value.size();
    auto [p, ec] = std::from_chars(arg->value.data(), end, v);
    if (ec != std::errc() || p != end)
      parse_error(text_, arg->position,
                  cat(spec_.name, ": '", name, "' must be an integer, got '", arg->value, "'"));
    return v;
  }
  double number(const std::string& name, double fallback) const {
    const Argument* arg = find(name);
    if (!arg) return fallback;
    try {
      std::size_t used = 0;
      const double v = std::stod(arg->value, &used);
      if (used == arg->value.size()) return v;
    } catch (const std::exception&) {
    }
    parse_error(text_, arg->position,
                cat(spec_.name, ": '", name, "' must be a number, got '", arg->value, "'"));
  }
  bool boolean(const std::string& name, bool fallback) const {
    const Argument* arg = find(name);
    if (!arg) return fallback;
    if (arg->value == "true" || arg->value == "1") return true;
    if (arg->value == "false" || arg->value == "0") return false;
    parse_error(text_, arg->position,
                cat(spec_.name, ": '", name, "' must be true or false, got '", arg->value, "'"));
  }
  std::string text(const std::string& name) const {
    const Argument* arg = find(name);
    if (!arg)
      parse_error(text_, spec_.position, cat(spec_.name, " needs its argument '", name, "'"));
    return arg->value;
  }

 private:
  std::string list() const {
    std::string out;
    for (const std::string& n : names_) out += cat(out.empty() ? "" : ", ", n);
    return out.empty() ? "no arguments" : out;
  }
  std::string_view text_;
  const LayerSpec& spec_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, std::size_t>> slot_;
};

bool is_builtin_neuron(const std::string& name) {
  try {
    (void)Neuron::builtin(name);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

Sequential parse_architecture(std::string_view text, const Shape& input_features,
                              const ArchitectureOptions& options) {
  if (options.time_steps <= 0)
    throw ValueError(cat("the number of time steps T must be positive, got ", options.time_steps));
  Sequential net;
  Shape features = input_features;
  std::uint64_t dropout_index = 0;
  for (const LayerSpec& spec : tokenize(text)) {
    std::unique_ptr<Layer> layer;
    const std::string& n = spec.name;
    try {
      if (n == "linear" || n == "fc") {
        ArgReader a(text, spec, {"out", "bias"});
        const std::int64_t out = a.integer("out", std::nullopt);
        if (out <= 0) parse_error(text, spec.position, cat(n, ": out must be positive"));
        if (features.size() != 1)
          throw ShapeError(cat("expects flat features (F), got ", shape_str(features),
                               "; put flatten before it"));
        layer = std::make_unique<Linear>(features[0], out, a.boolean("bias", true));
      } else if (n == "conv") {
        ArgReader a(text, spec, {"out", "kernel", "stride", "padding", "bias"});
        const std::int64_t out = a.integer("out", std::nullopt);
        const std::int64_t kernel = a.integer("kernel", std::nullopt);
        if (out <= 0 || kernel <= 0)
          parse_error(text, spec.position, "conv: out and kernel must be positive");
        if (features.size() != 3)
          throw ShapeError(cat("expects image features (C, H, W), got ", shape_str(features)));
        layer = std::make_unique<Conv2d>(features[0], out, kernel, a.integer("stride", 1),
                                         a.integer("padding", 0), a.boolean("bias", true));
      } else if (n == "maxpool" || n == "avgpool") {
        ArgReader a(text, spec, {"kernel", "stride"});
        const std::int64_t k = a.integer("kernel", std::nullopt);
        layer = std::make_unique<Pool2d>(n == "maxpool" ? Pool2d::Mode::max : Pool2d::Mode::average,
                                         k, a.integer("stride", k));
      } else if (n == "bn" || n == "batchnorm") {
        ArgReader a(text, spec, {"momentum", "eps"});
        if (features.empty()) throw ShapeError("bn needs a channel axis");
        layer = std::make_unique<BatchNorm>(features[0], a.number("momentum", 0.1),
                                            a.number("eps", 1e-5));
      } else if (n == "flatten") {
        ArgReader a(text, spec, {});
        layer = std::make_unique<Flatten>();
      } else if (n == "dropout") {
        ArgReader a(text, spec, {"p"});
        layer = std::make_unique<Dropout>(a.number("p", 0.5),
                                          options.dropout_seed * 1000003 + dropout_index++);
      } else if (n == "sn") {
        ArgReader a(text, spec, {});
        layer = std::make_unique<Spiking>(options.neuron ? *options.neuron : Neuron::builtin("if"),
                                          options.time_steps,
                                          options.neuron ? options.neuron_spelling : "if");
      } else if (n == "neuron") {
        ArgReader a(text, spec, {"file"});
        const std::string file = a.text("file");
        layer = std::make_unique<Spiking>(Neuron::named_or_file(file), options.time_steps,
                                          cat("neuron(", file, ")"));
      } else if (is_builtin_neuron(n)) {
        ArgReader a(text, spec, {});
        layer = std::make_unique<Spiking>(Neuron::builtin(n), options.time_steps, n);
      } else {
        parse_error(text, spec.position,
                    cat("unknown layer '", n,
                        "'; layers: linear, conv, maxpool, avgpool, bn, flatten, dropout, sn, "
                        "neuron(FILE), and the built-in neurons if, lif, plif, alif, izhikevich, "
                        "eif, qif"));
      }
      features = layer->output_features(features);
    } catch (const ShapeError& e) {
      throw ShapeError(cat("layer ", net.size(), " '", spec.text, "' (position ", spec.position,
                           "): ", e.what()));
    }
    net.add(std::move(layer));
  }
  return net;
}

}  // namespace flexkit::nn
