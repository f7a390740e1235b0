// Layers, losses and optimizers for training networks — spiking ones included — on flexkit's
// kernels, in the layer-wise style: each layer owns its parameters and their gradients and
// implements forward and backward explicitly; a Sequential chains them. No tape.
//
// Activations have one layout through the whole network, (*features, T, N): the features
// ((C, H, W) for images, (F) after Flatten), then the time step, then the batch innermost. So
// Conv2d, Linear and BatchNorm see T·N as their batch through a free reshape, and a Spiking
// layer reads its sequences in place (time axis next to the batch). Before the first Spiking
// layer the input is the same at every step, so T is 1 there and the Spiking layer repeats it:
// the layers before it run once, not T times (the same values as running them on the repeated
// input, BatchNorm's normalisation included; its running variance is unbiased by m/(m−1) over
// the m values it sees, where T copies would give Tm/(Tm−1)).
//
//   nn::Sequential net = nn::parse_architecture("flatten linear(512) lif linear(10) lif",
//                                               {1, 28, 28}, {.time_steps = 4});
//   Array out = net.forward(x);                    // x (1, 28, 28, 1, N) -> (10, 4, N)
//   nn::LossResult l = nn::rate_loss(out, labels, nn::LossKind::cross_entropy);
//   net.zero_grad(); net.backward(l.grad_output);
//   optimizer.step(net.parameters(), lr);
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flexkit/array.hpp"
#include "flexkit/autoflex.hpp"
#include "flexkit/distributed.hpp"
#include "flexkit/expr.hpp"
#include "flexkit/heavy_op_options.hpp"
#include "flexkit/neuron.hpp"
#include "flexkit/nn_io.hpp"

namespace flexkit::gemm {
struct ExactSums;  // an integer product's unrounded sums (internal)
}

namespace flexkit::nn {

// A counter-based generator (splitmix64): the same sequence on every platform and compiler, so
// initialisation, dropout masks and shuffles are reproducible from a seed alone.
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : state_(seed) {}
  std::uint64_t next_u64();
  double uniform();                      // [0, 1), 53 random bits
  double uniform(double lo, double hi);  // [lo, hi)
  std::uint64_t state() const { return state_; }
  void set_state(std::uint64_t s) { state_ = s; }

 private:
  std::uint64_t state_;
};

// A learnable tensor (or a buffer such as BatchNorm's running mean) with its gradient.
struct Parameter {
  std::string name;  // "weight", "bias", "running_mean", a neuron parameter's name
  Array value;
  Array grad;             // same shape and dtype; accumulated by backward, cleared by zero_grad
  bool trainable = true;  // false for buffers
  // Set while `grad` holds the zeros zero_grad (or its creation) wrote: the next layer product
  // into it then writes instead of adding to them, the same values without reading the zeros.
  // Code that writes `grad` by other means clears it.
  bool grad_zeroed = false;
  // flex16 with f32 master weights: the copy the optimizer updates; `value` is its flex16
  // rounding, rewritten after every step. Undefined otherwise.
  Array master;
  // Data-parallel flex16 training (Layer::set_gradient_sums): the gradient as the exact integer
  // sums of this process's shard, not yet rounded into `grad`; the trainer adds them over the
  // processes and rounds the total once, as one process would round the whole batch's.
  std::shared_ptr<gemm::ExactSums> grad_sums;
};

// How a network stores what it computes. f32: everything in f32. flex16: the weights, the
// activations, their gradients and the optimizer's state in flex16, each tensor's exponent
// managed by Autoflex (IwlPolicy::autoflex); spikes stay u8 and the products stay exact. The
// batch statistics and BatchNorm's running estimates, the neurons' residuals and the loss stay
// f32 (precision_formats() lists them).
struct Precision {
  DType dtype = DType::f32;     // f32 or flex16
  bool master_weights = false;  // flex16: keep an f32 master copy of every trainable tensor
  bool operator==(const Precision&) const = default;
};

// Which format each class of tensor is kept in, in words, for summaries.
std::vector<std::pair<std::string, std::string>> precision_formats(const Precision& precision);

// The class of a managed flex16 tensor, for reports.
enum class TensorClass { weights, activations, gradients, optimizer_state };
std::string_view tensor_class_name(TensorClass c);

// A flex16 tensor's exponent manager with the tensor's name ("3.linear.output").
struct ManagedTensor {
  std::string name;
  TensorClass tensor_class = TensorClass::activations;
  Autoflex manager;
};

class Layer {
 public:
  virtual ~Layer() = default;
  // "linear(784, 512, bias=true)": the architecture-string spelling with every value explicit.
  virtual std::string describe() const = 0;
  // The type name as the architecture string spells it ("linear", "conv", "lif", ...).
  virtual std::string kind() const = 0;
  // The feature shape this layer produces from `input` (both without T and N); throws
  // ShapeError naming the layer when the shapes do not chain.
  virtual Shape output_features(const Shape& input) const = 0;
  // x: (*features, T, N). Training mode keeps what backward needs.
  virtual Array forward(const Array& x) = 0;
  // The gradient of the loss with respect to the last forward's input; parameter gradients
  // are added to their Parameter::grad.
  virtual Array backward(const Array& grad_output) = 0;
  // Learnable tensors and buffers, in a fixed order (the saved names follow it).
  virtual std::vector<Parameter*> parameters() { return {}; }
  // Fresh values as PyTorch initialises them (Kaiming-uniform weights, uniform biases).
  virtual void reset_parameters(Rng&) {}
  // Moves parameters to a device (and drops anything kept for backward).
  virtual void to(Device device);
  // Drops what the last training forward kept for backward (a backward after it throws).
  // Sequential::backward calls it on the layers whose backward it skips, so that their saved
  // activations do not outlive the step.
  virtual void drop_saved() {}
  // A JSON object describing the layer completely (type, sizes, settings).
  virtual JsonValue config() const = 0;
  void set_training(bool training) { training_ = training; }
  bool training() const { return training_; }
  // Whether backward must return the input gradient (the default). Off, a layer whose input
  // gradient is a product of its own (Linear, Conv2d) skips it and backward returns an undefined
  // Array; parameter gradients are the same either way.
  void set_input_gradient(bool needed) { input_gradient_ = needed; }
  bool input_gradient() const { return input_gradient_; }
  // Stores the trainable parameters (and from now on what the layer writes) as `precision`
  // says; the values are converted (flex16: rounded to nearest at the finest iwl holding them).
  virtual void set_precision(const Precision& precision);
  const Precision& precision() const { return precision_; }
  // The exponent managers of the flex16 tensors the layer writes (outputs, input gradients),
  // by role; parameters carry theirs on their storage.
  std::vector<ManagedTensor> managed_tensors() const;
  // The manager of what the layer writes as `role` (a ManagedTensor name), made now if the layer
  // has not written it yet: a resumed run restores every history before its first step.
  Autoflex manager(const std::string& role, TensorClass tensor_class);
  // Data-parallel flex16 training: backward leaves the parameter gradients as exact integer
  // sums (Parameter::grad_sums) instead of rounding them. Layers whose gradients are exact
  // products (Linear, Conv2d) take it; any other layer with trainable parameters throws
  // UnsupportedError, since its gradients could not be summed exactly over processes.
  virtual void set_gradient_sums(bool on);
  bool gradient_sums() const { return gradient_sums_; }
  // Why a training step through this layer cannot be captured as a CUDA graph and replayed
  // (host work that differs from step to step); empty when it can.
  virtual std::string capture_obstacle() const { return {}; }

 protected:
  bool flex() const { return precision_.dtype == DType::flex16; }
  // A fresh array for what the layer writes as `role`: f32, or flex16 served by the role's
  // manager (the same one every step, so its history carries over).
  Array new_tensor(const std::string& role, const Shape& shape, Device device,
                   TensorClass tensor_class = TensorClass::activations);
  // How the layer's writes store: autoflex for flex16 outputs.
  AssignOptions writes() const;
  HeavyOpOptions heavy_writes(double beta = 0.0) const;
  // The beta with which a product adds into p.grad (made if missing): 0 while it holds zero_grad's
  // zeros, 1 otherwise; p.grad counts as written from then on.
  static double gradient_beta(Parameter& p);
  // Adds g's sums over its second axis (a bias gradient: g (out, positions)) to p's gradient,
  // in flex16 as an exact product with ones (so that it is summed exactly over processes too).
  void add_bias_gradient(Parameter& p, const Array& g);
  // Adds exact sums to p.grad_sums (set_gradient_sums).
  static void add_sums(Parameter& p, gemm::ExactSums sums);

  bool training_ = true;
  bool input_gradient_ = true;
  bool gradient_sums_ = false;
  Device device_ = Device::cpu();
  Precision precision_;
  std::map<std::string, ManagedTensor> managers_;
};

// y = W·x + b over the features; W is (out, in) as in PyTorch.
class Linear : public Layer {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  std::string describe() const override;
  std::string kind() const override { return "linear"; }
  Shape output_features(const Shape& input) const override;
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  void set_gradient_sums(bool on) override { gradient_sums_ = on; }
  std::vector<Parameter*> parameters() override;
  void reset_parameters(Rng& rng) override;
  void to(Device device) override;
  void drop_saved() override { input_ = Array(); }
  JsonValue config() const override;
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  std::int64_t in_, out_;
  bool has_bias_;
  Parameter weight_, bias_;
  Array input_;  // (in, T·N) of the last training forward
  Shape input_shape_;
};

// 2-d convolution over (C, H, W, T, N). The weight is kept as (C, R, S, K), the layout the
// convolution kernels read; it is saved in PyTorch's (K, C, R, S).
class Conv2d : public Layer {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride = 1, std::int64_t padding = 0, bool bias = true);
  std::string describe() const override;
  std::string kind() const override { return "conv"; }
  Shape output_features(const Shape& input) const override;
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  void set_gradient_sums(bool on) override { gradient_sums_ = on; }
  std::vector<Parameter*> parameters() override;
  void reset_parameters(Rng& rng) override;
  void to(Device device) override;
  void drop_saved() override {
    saved_input_ = Array();
    saved_taps_ = Array();
  }
  JsonValue config() const override;
  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  std::int64_t in_, out_, kernel_, stride_, padding_;
  bool has_bias_;
  Parameter weight_, bias_;
  Array saved_input_;  // what backward needs
  Array saved_taps_;   // the input's gathered taps, where the forward gathered them
  Shape input_shape_;
};

// Max or average pooling over H and W of (C, H, W, T, N), no padding.
class Pool2d : public Layer {
 public:
  enum class Mode { max, average };
  Pool2d(Mode mode, std::int64_t kernel, std::int64_t stride = 0 /* = kernel */);
  std::string describe() const override;
  std::string kind() const override { return mode_ == Mode::max ? "maxpool" : "avgpool"; }
  Shape output_features(const Shape& input) const override;
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  void drop_saved() override;
  JsonValue config() const override;
  // In training, for a max pool whose windows tile its input of spikes (u8) with stride =
  // kernel <= PooledGradient::kMaxKernel: its backward handed to the neuron that made the spikes
  // (Spiking::backward_through_pool), which routes each window's gradient itself; the saved
  // input is released. Otherwise nothing (the pool's own backward runs).
  std::optional<PooledGradient> pooled_gradient(const Array& grad_output);

 private:
  Expr max_of_taps(const Array& x4, const Shape& out) const;
  Array backward_tiled(const Array& g4);
  Array backward_by_taps(const Array& g4);
  Mode mode_;
  std::int64_t kernel_, stride_;
  Array input_, output_;
  Shape output_shape_;
  Array tap_order_;  // (1, 1, k, 1, k, 1): r·k + s, on the device of the last backward
};

// Per-channel (axis 0) batch normalisation over every other axis: batch statistics in
// training (biased variance for the normalisation, unbiased for the running estimate, as
// PyTorch), running statistics in evaluation.
class BatchNorm : public Layer {
 public:
  explicit BatchNorm(std::int64_t channels, double momentum = 0.1, double eps = 1e-5,
                     bool affine = true);
  std::string describe() const override;
  std::string kind() const override { return "bn"; }
  Shape output_features(const Shape& input) const override;
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  std::vector<Parameter*> parameters() override;
  void reset_parameters(Rng& rng) override;
  void to(Device device) override;
  void drop_saved() override;
  JsonValue config() const override;

  // Folded into the spiking layer after it (Sequential does this in training): the batch
  // statistics and running estimates as a training forward takes them, returned as the map
  // y = (x - center) * scale + shift per channel ([C] each), which the neuron applies as it reads
  // x; y itself is never stored.
  struct Fold {
    Array center, scale, shift;
  };
  Fold fold_forward(const Array& x);
  // The input gradient of a folded forward from what the neuron's backward returns: its input
  // gradient dL/dy * scale, and per channel sum(dL/dy * (x - center)) and sum(dL/dy).
  Array fold_backward(const Array& grad_through_scale, const Array& sum_centered, const Array& sum);
  // Data-parallel training with synchronised BatchNorm: the batch statistics (and the sums of
  // the backward) are taken over the processes' shards together, as one process would take them
  // over the global batch. Null: this process's shard alone.
  void synchronise(std::shared_ptr<dist::Communicator> communicator) {
    communicator_ = std::move(communicator);
  }

 private:
  struct Statistics {
    Array mean, var;     // (C, 1): the mean and the biased variance
    std::int64_t count;  // the values per channel they are over
  };
  Statistics batch_statistics(const Array& x2);
  // The per-channel factor of the normalisation: inv_std, times the weight when affine.
  Expr scaled(const Expr& inv_std) const;
  // Adds (C, 1) weight and bias gradients (nothing without the affine map).
  void add_affine_gradients(const Expr& d_weight, const Expr& d_bias);
  // Per-channel sums over the processes (a synchronised run; else `sums` itself).
  Array summed_over_processes(const Array& sums, const char* what);
  void update_running(const Array& mu, const Array& var, std::int64_t m);
  std::shared_ptr<dist::Communicator> communicator_;
  std::int64_t count_ = 0;  // the values per channel of the last training forward's statistics
  std::int64_t channels_;
  double momentum_, eps_;
  bool affine_;
  Parameter weight_, bias_, running_mean_, running_var_;
  Array x_hat_, inv_std_;  // of the last training forward: (C, M) and (C, 1)
  Array x_, mu_, var_;     // of the last folded forward: (C, M), (C, 1) and (C, 1)
  Shape input_shape_;
};

// (*features, T, N) -> (prod(features), T, N): a view.
class Flatten : public Layer {
 public:
  std::string describe() const override { return "flatten"; }
  std::string kind() const override { return "flatten"; }
  Shape output_features(const Shape& input) const override;
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  JsonValue config() const override;

 private:
  Shape input_shape_;
};

// Zeroes features with probability p in training and scales the rest by 1/(1-p); one mask per
// sample shared by every time step (SpikingJelly's multi-step dropout). Seeded: the masks
// follow from the seed and the number of forward calls made.
class Dropout : public Layer {
 public:
  explicit Dropout(double p = 0.5, std::uint64_t seed = 0);
  std::string describe() const override;
  std::string kind() const override { return "dropout"; }
  Shape output_features(const Shape& input) const override { return input; }
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  void drop_saved() override { mask_ = Array(); }
  std::string capture_obstacle() const override;
  JsonValue config() const override;
  Rng& rng() { return rng_; }
  // Data-parallel training: the batches this layer sees are samples [offset, offset + B) of a
  // global batch of `global_batch`; each mask is drawn for the whole global batch (the same
  // draws in every process, and in one process training on the global batch) and this part
  // used. global_batch 0: the batch is the whole batch.
  void set_shard(std::int64_t offset, std::int64_t global_batch) {
    shard_offset_ = offset;
    global_batch_ = global_batch;
  }

 private:
  double p_;
  Rng rng_;
  Array mask_;
  std::int64_t shard_offset_ = 0, global_batch_ = 0;
};

// A spiking neuron run over T steps in one kernel call, reading and writing (*f, T, N) in
// place; its state starts afresh for every batch. An input with T = 1 is repeated over the T
// steps (its gradient is summed over them). Learnable scalar parameters of the neuron (PLIF's
// w) are trained with the rest. The first output of the neuron is the layer's output.
class Spiking : public Layer {
 public:
  Spiking(Neuron neuron, std::int64_t time_steps, std::string spelling = "");
  std::string describe() const override;
  std::string kind() const override { return spelling_; }
  Shape output_features(const Shape& input) const override { return input; }
  Array forward(const Array& x) override;
  Array backward(const Array& grad_output) override;
  std::vector<Parameter*> parameters() override;
  void reset_parameters(Rng& rng) override;
  void to(Device device) override;
  void drop_saved() override;
  JsonValue config() const override;
  const Neuron& neuron() const { return neuron_; }
  std::int64_t time_steps() const { return steps_; }

  // The forward with a BatchNorm's map folded in front of the neuron (BatchNorm::fold_forward),
  // for an input with all T steps or one (read at every step); backward then returns dL/dy *
  // scale (summed over the steps for a one-step input) and keeps the per-channel sums
  // BatchNorm::fold_backward takes.
  Array forward_folded(const Array& x, const BatchNorm::Fold& fold);
  struct FoldGradients {
    Array sum_centered, sum;  // [C] each
  };
  const FoldGradients& fold_gradients() const { return fold_gradients_; }
  // backward() given the gradient of the max pool that follows the layer (Pool2d::
  // pooled_gradient): the neuron's backward kernel routes it, so the gradient of the layer's
  // output is never stored.
  Array backward_through_pool(const PooledGradient& pooled);

 private:
  Array run_forward(const Array& x, const BatchNorm::Fold* fold);
  Array run_backward(const NamedArrays& grad_outputs,
                     const std::map<std::string, PooledGradient>& pooled);
  Neuron neuron_;
  std::int64_t steps_;
  std::string spelling_;
  std::vector<Parameter> params_;  // learnable scalars
  std::shared_ptr<const NeuronResiduals> residuals_;
  bool folded_ = false;
  FoldGradients fold_gradients_;
  bool repeated_input_ = false;
  Shape input_shape_;
};

// Layers in order. Parameter names are "<layer index>.<name>", as PyTorch's state_dict keys.
class Sequential {
 public:
  Sequential() = default;
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;
  void add(std::unique_ptr<Layer> layer);
  std::size_t size() const { return layers_.size(); }
  Layer& operator[](std::size_t i) { return *layers_[i]; }
  const Layer& operator[](std::size_t i) const { return *layers_[i]; }
  Array forward(const Array& x);
  // `layer_done(i)`, when given, is called as soon as layer i's parameter gradients are final
  // (from the last layer down): data-parallel training starts exchanging them then.
  Array backward(const Array& grad_output,
                 const std::function<void(std::size_t)>& layer_done = nullptr);
  // Whether backward returns the gradient with respect to the network's input (the default).
  // Training needs only the parameters' gradients: off, the layers in front of the first trainable
  // parameter skip their input gradients (a first convolution's bprop, the largest of them) and
  // backward returns an undefined Array.
  void set_input_gradient(bool needed) { input_gradient_ = needed; }
  void set_training(bool training);
  void to(Device device);
  // Every layer's precision (Layer::set_precision); a flex16 network also converts an f32
  // input and an f32 loss gradient to flex16 under managers of its own.
  void set_precision(const Precision& precision);
  const Precision& precision() const { return precision_; }
  // The exponent managers of every flex16 tensor the network keeps or writes, with names.
  std::vector<ManagedTensor> managed_tensors();
  // The manager a name of managed_tensors() refers to, made (with the gradient it serves, for
  // "<layer>.<kind>.<parameter>.grad") if nothing has been written under it yet. ValueError for a
  // name the network has no tensor for.
  Autoflex manager(const std::string& name, TensorClass tensor_class);
  void zero_grad();
  void reset_parameters(Rng& rng);
  // Every parameter and buffer with its name, in layer order.
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  std::vector<Parameter*> parameters();  // trainable ones only
  // The feature shape out of the last layer for `input`; throws ShapeError naming the layer
  // (index and spelling) whose input does not fit.
  Shape check_shapes(const Shape& input) const;

 private:
  Spiking* fold_target(std::size_t i, const Array& x);
  std::vector<std::unique_ptr<Layer>> layers_;
  // In training, a BatchNorm followed by a spiking layer runs as one (BatchNorm::Fold):
  // folded_[i] marks the BatchNorm at i whose last forward was folded into layer i + 1.
  std::vector<char> folded_;
  bool input_gradient_ = true;
  Precision precision_;
  Autoflex input_manager_, loss_gradient_manager_;
};

// ---- architecture strings --------------------------------------------------------------------
// Layers separated by spaces, commas or '-', each NAME or NAME(args), args positional or
// key=value:
//   linear(OUT[, bias=true])         conv(OUT, KERNEL[, stride=1][, padding=0][, bias=true])
//   maxpool(K[, stride=K])  avgpool(K[, stride=K])  bn  flatten  dropout(P)
//   sn   the configured neuron (ArchitectureOptions::neuron)
//   if, lif, plif, alif, ... a built-in neuron by name, or neuron(FILE) from a file
// Input sizes are inferred from `input_features`. Throws ValueError with the character
// position for text that does not parse, ShapeError naming the layer for shapes that do not
// chain.
struct ArchitectureOptions {
  std::int64_t time_steps = 4;
  std::optional<Neuron> neuron;  // what `sn` means; the built-in IF when unset
  std::string neuron_spelling = "if";
  std::uint64_t dropout_seed = 0;
};
Sequential parse_architecture(std::string_view text, const Shape& input_features,
                              const ArchitectureOptions& options = {});

// ---- losses on the output spike rate
// -------------------------------------------------------------
enum class LossKind { cross_entropy, mse };
LossKind parse_loss(std::string_view name);  // "ce" | "cross_entropy" | "mse"
std::string_view loss_name(LossKind kind);

struct LossResult {
  double loss = 0;           // mean over the batch
  std::int64_t correct = 0;  // argmax of the rate equal to the label (ties: lowest class)
  Array grad_output;         // dL/d(output), the output's shape
  Array rate;                // (classes, N)
};
// output (classes, T, N): the rate is its mean over T. cross_entropy: softmax over the classes
// of the rate, mean over the batch; mse: mean over batch and classes of (rate − one-hot)², as
// PyTorch's mse_loss. labels: i32 [N] on the output's device.
LossResult rate_loss(const Array& output, const Array& labels, LossKind kind);

// The same without waiting for the device, for training loops: the batch's mean loss and its
// count of correct answers are written on the output's device, into `loss` and `correct` when
// given (one-element f32 arrays, e.g. slots of a per-epoch record) or into fresh ones. Labels
// are not range-checked here (that needs a read): check them once, before the loop.
// `gradient_batch` > 0: grad_output is that of the mean over a batch of this many samples, of
// which this one is a part (a data-parallel shard of the global batch; the loss stays this
// part's mean).
struct DeviceLossResult {
  Array loss;     // f32 [1]: the mean over the batch
  Array correct;  // f32 [1]: how many argmax(rate) equal the label
  Array grad_output;
  Array rate;
};
DeviceLossResult rate_loss_on_device(const Array& output, const Array& labels, LossKind kind,
                                     const Array& loss = {}, const Array& correct = {},
                                     std::int64_t gradient_batch = 0);

// ---- optimizers: every update is fused expressions over the parameter tensors
// ---------------------
struct OptimizerOptions {
  double momentum = 0.9;                          // SGD
  bool nesterov = false;                          // SGD
  double weight_decay = 0.0;                      // SGD: L2 added to the gradient; AdamW: decoupled
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  // How updates of flex16 tensors (weights, optimizer state, the published rounding of a master
  // copy) round: to nearest, or stochastically with a seed derived from rounding_seed, the step,
  // the parameter and the tensor, so that a run repeats bit for bit.
  Rounding rounding = Rounding::nearest_even;
  std::uint64_t rounding_seed = 0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update of every parameter from its gradient, with learning rate lr: prepare, then
  // update.
  void step(const std::vector<Parameter*>& params, double lr) {
    prepare(params, lr);
    update(params);
  }
  // The host's part of a step: counts it, makes the state on the first, and writes what changes
  // from step to step (the learning rate, Adam's bias corrections) into a small device array
  // that the update reads, only when it changed.
  void prepare(const std::vector<Parameter*>& params, double lr);
  // The device's part: every parameter's update, the same work at every step after the first
  // (what a captured training step replays).
  virtual void update(const std::vector<Parameter*>& params) = 0;
  // The state a checkpoint keeps (buffers in parameter order) and the number of steps taken.
  virtual std::vector<Array> state() const = 0;
  void set_state(std::vector<Array> state, std::int64_t steps);
  std::int64_t steps() const { return steps_; }

 protected:
  // The state a fresh optimizer starts from, made at the first step (`params` have gradients).
  virtual void make_state(const std::vector<Parameter*>& params) = 0;
  virtual void restore_state(std::vector<Array> state) = 0;
  // The values of this step's device scalars (scalar(i) reads entry i), in double: they are
  // rounded to f32 once, as an expression's scalar constants are.
  virtual std::vector<double> step_scalars(double lr) const = 0;
  Array scalar(std::size_t i) const;

  std::int64_t steps_ = 0;  // counting the one in progress, once prepared

 private:
  bool has_state_ = false;
  Array scalars_;                // f32 on the parameters. device
  std::vector<float> uploaded_;  // what scalars_ holds (NaN: not known)
};
// "sgd" (momentum 0 for plain SGD), "adam", "adamw"; ValueError for other names or options.
std::unique_ptr<Optimizer> make_optimizer(std::string_view name, const OptimizerOptions& options);

// Learning-rate schedules, as PyTorch's per-epoch schedulers.
struct Schedule {
  enum class Kind { constant, step, cosine } kind = Kind::constant;
  std::int64_t step_size = 30;  // step: multiply by gamma every step_size epochs
  double gamma = 0.1;
  std::int64_t total_epochs = 1;  // cosine: annealed to eta_min over these
  double eta_min = 0.0;
  double lr(double base_lr, std::int64_t epoch) const;
};
Schedule::Kind parse_schedule(std::string_view name);  // "constant" | "step" | "cosine"

}  // namespace flexkit::nn
