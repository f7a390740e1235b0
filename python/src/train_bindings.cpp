// The trainer behind `flexkit train` from Python: a dict of its options in, a dict of what the
// run measured out; and the .npz archives a run writes.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

#include <csignal>

#include "bindings.hpp"
#include "flexkit/error.hpp"
#include "flexkit/nn_io.hpp"
#include "flexkit/train.hpp"

namespace flexkit::python {

namespace {

template <class T>
void set(std::optional<T>& field, nb::handle value) {
  if (value.is_none())
    field.reset();
  else
    field = nb::cast<T>(value);
}

nn::TrainConfig config_from(const nb::dict& options) {
  nn::TrainConfig c;
  for (auto [key_handle, value] : options) {
    const std::string key = nb::cast<std::string>(key_handle);
    if (key == "model")
      set(c.model, value);
    else if (key == "neuron")
      set(c.neuron, value);
    else if (key == "neuron_settings") {
      if (nb::isinstance<nb::dict>(value)) {
        for (auto [k, v] : nb::borrow<nb::dict>(value))
          c.neuron_settings.emplace_back(nb::cast<std::string>(k),
                                         nb::cast<std::string>(nb::str(v)));
      } else {
        for (nb::handle pair : value)
          c.neuron_settings.emplace_back(nb::cast<std::string>(pair[0]),
                                         nb::cast<std::string>(nb::str(pair[1])));
      }
    } else if (key == "time_steps")
      set(c.time_steps, value);
    else if (key == "epochs")
      set(c.epochs, value);
    else if (key == "batch")
      set(c.batch, value);
    else if (key == "lr")
      set(c.lr, value);
    else if (key == "momentum")
      set(c.momentum, value);
    else if (key == "weight_decay")
      set(c.weight_decay, value);
    else if (key == "nesterov")
      set(c.nesterov, value);
    else if (key == "optimizer")
      set(c.optimizer, value);
    else if (key == "loss")
      set(c.loss, value);
    else if (key == "schedule")
      set(c.schedule, value);
    else if (key == "step_size")
      set(c.step_size, value);
    else if (key == "gamma")
      set(c.gamma, value);
    else if (key == "seed")
      set(c.seed, value);
    else if (key == "limit")
      set(c.limit, value);
    else if (key == "device")
      c.device = nb::cast<std::string>(value);
    else if (key == "data_dir")
      c.data_dir = nb::cast<std::string>(nb::str(value));
    else if (key == "checkpoint_dir")
      c.checkpoint_dir = nb::cast<std::string>(nb::str(value));
    else if (key == "resume")
      c.resume = nb::cast<std::string>(nb::str(value));
    else if (key == "save")
      c.save = nb::cast<std::string>(nb::str(value));
    else if (key == "summary")
      c.summary = nb::cast<std::string>(nb::str(value));
    else if (key == "quiet")
      c.quiet = nb::cast<bool>(value);
    else if (key == "cuda_graph")
      c.cuda_graph = nb::cast<bool>(value);
    else
      throw nb::value_error(
          ("train: unknown option '" + key +
           "'; options: model, neuron, neuron_settings, time_steps, epochs, batch, lr, momentum, "
           "weight_decay, nesterov, optimizer, loss, schedule, step_size, gamma, seed, limit, "
           "device, data_dir, checkpoint_dir, resume, save, summary, quiet, cuda_graph")
              .c_str());
  }
  return c;
}

nb::dict result_dict(const nn::TrainResult& r) {
  nb::list history;
  for (const nn::EpochRecord& e : r.history) {
    nb::dict d;
    d["epoch"] = e.epoch;
    d["train_loss"] = e.train_loss;
    d["train_accuracy"] = e.train_accuracy;
    d["test_loss"] = e.test_loss;
    d["test_accuracy"] = e.test_accuracy;
    d["lr"] = e.lr;
    d["seconds"] = e.seconds;
    history.append(d);
  }
  nb::dict d;
  d["history"] = history;
  d["test_accuracy"] = r.test_accuracy;
  d["best_test_accuracy"] = r.best_test_accuracy;
  d["wall_seconds"] = r.wall_seconds;
  d["samples_per_second"] = r.samples_per_second;
  d["peak_host_bytes"] = r.peak_host_bytes;
  d["peak_device_bytes"] = r.peak_device_bytes;
  d["device"] = r.device;
  d["architecture"] = r.architecture;
  d["interrupted"] = r.interrupted;
  if (r.device.rfind("cuda", 0) == 0) {
    nb::dict graph;
    graph["used"] = r.cuda_graph.used;
    graph["note"] = r.cuda_graph.note;
    graph["captures"] = r.cuda_graph.captures;
    graph["replays"] = r.cuda_graph.replays;
    graph["uncaptured_steps"] = r.cuda_graph.uncaptured_steps;
    graph["nodes"] = r.cuda_graph.nodes;
    d["cuda_graph"] = graph;
  }
  return d;
}

extern "C" void stop_training_on_signal(int) {
  nn::request_stop();
}

// Ctrl-C during fk.train stops after the current step, as on the command line (Python's own
// handler cannot run while the trainer holds the thread); the previous handler comes back after.
class InterruptGuard {
 public:
  InterruptGuard() : previous_(std::signal(SIGINT, stop_training_on_signal)) {}
  ~InterruptGuard() { std::signal(SIGINT, previous_); }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  void (*previous_)(int);
};

}  // namespace

void bind_train(nb::module_& m) {
  m.def(
      "_train",
      [](const nb::dict& options) {
        const nn::TrainConfig config = config_from(options);
        nn::TrainResult result;
        {
          InterruptGuard guard;
          nb::gil_scoped_release release;  // other Python threads run meanwhile
          result = nn::train(config);
        }
        if (result.interrupted) {
          const std::string message = "training stopped by Ctrl-C after " +
                                      std::to_string(result.history.size()) +
                                      " complete epoch(s); checkpoints already written are kept";
          PyErr_SetString(PyExc_KeyboardInterrupt, message.c_str());
          throw nb::python_error();
        }
        return result_dict(result);
      },
      nb::arg("config"));
  m.def(
      "_evaluate_checkpoint",
      [](const std::string& checkpoint, const std::string& device, const std::string& data_dir,
         std::int64_t limit) {
        const nn::EvalResult r = nn::evaluate_checkpoint(checkpoint, device, data_dir, limit);
        nb::dict d;
        d["test_loss"] = r.test_loss;
        d["test_accuracy"] = r.test_accuracy;
        d["samples"] = r.samples;
        d["architecture"] = r.architecture;
        d["device"] = r.device;
        return d;
      },
      nb::arg("checkpoint"), nb::arg("device") = "auto", nb::arg("data_dir") = "",
      nb::arg("limit") = 0);
  m.def("_presets", [] {
    nb::list list;
    for (const nn::Preset& p : nn::presets()) {
      nb::dict d;
      d["name"] = p.name;
      d["description"] = p.description;
      d["architecture"] = p.architecture;
      d["neuron"] = p.neuron;
      d["time_steps"] = p.time_steps;
      d["epochs"] = p.epochs;
      d["batch"] = p.batch;
      d["lr"] = p.lr;
      d["optimizer"] = p.optimizer;
      d["loss"] = p.loss;
      d["schedule"] = p.schedule;
      list.append(d);
    }
    return list;
  });
  m.def(
      "_load_npz", [](const std::string& path) { return nn::load_npz(path); }, nb::arg("path"));
  m.def(
      "_load_npz_strings", [](const std::string& path) { return nn::load_npz_strings(path); },
      nb::arg("path"));
}

}  // namespace flexkit::python
