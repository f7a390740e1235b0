// flexkit's C++ errors as Python exceptions. Each class derives from the built-in exception a
// Python caller would catch for that mistake (DTypeError from both TypeError and ValueError),
// and carries the C++ message unchanged.
#include <new>

#include "bindings.hpp"
#include "flexkit/error.hpp"
#include "flexkit/neuron_language.hpp"
#include "flexkit/train.hpp"

namespace flexkit::python {

namespace {

struct ExceptionClasses {
  PyObject *shape, *dtype, *device, *format, *neuron, *io, *cuda, *out_of_memory, *compile,
      *unsupported, *diverged;
};
ExceptionClasses classes{};

PyObject* make_class(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("flexkit.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::borrow(type);
  return type;
}

PyObject* one(PyObject* base) {
  return PyTuple_Pack(1, base);
}

}  // namespace

void bind_errors(nb::module_& m) {
  classes.shape = make_class(m, "ShapeError", one(PyExc_ValueError),
                             "A shape, rank or broadcast that does not fit the operation.");
  classes.dtype = make_class(m, "DTypeError", PyTuple_Pack(2, PyExc_TypeError, PyExc_ValueError),
                             "A dtype the operation does not support.");
  classes.device = make_class(m, "DeviceError", one(PyExc_ValueError),
                              "Operands on the wrong device, or a device that does not exist.");
  classes.format = make_class(m, "FormatError", one(PyExc_ValueError),
                              "A file whose contents are not what its format promises.");
  classes.neuron = make_class(m, "NeuronError", one(PyExc_ValueError),
                              "Neuron-language text that is not a valid neuron (line:column in "
                              "the message; .line and .column attributes).");
  classes.io =
      make_class(m, "IoError", one(PyExc_OSError), "A file that cannot be read or written.");
  classes.cuda = make_class(m, "CudaError", one(PyExc_RuntimeError), "A failing CUDA call.");
  classes.out_of_memory =
      make_class(m, "OutOfMemoryError", one(PyExc_MemoryError), "Host or device memory exhausted.");
  classes.compile = make_class(m, "CompileError", one(PyExc_RuntimeError),
                               "Run-time compilation of a kernel failed (the log is the message).");
  classes.unsupported = make_class(m, "UnsupportedError", one(PyExc_RuntimeError),
                                   "The operation needs a backend this build or machine lacks.");
  classes.diverged = make_class(m, "TrainingDiverged", one(PyExc_RuntimeError),
                                "Training stopped because the loss was no longer finite.");

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const NeuronError& e) {
      nb::object error = nb::steal(PyObject_CallFunction(classes.neuron, "s", e.what()));
      if (!error.is_valid()) throw nb::python_error();
      error.attr("line") = e.line();
      error.attr("column") = e.column();
      PyErr_SetObject(classes.neuron, error.ptr());
    } catch (const ShapeError& e) {
      PyErr_SetString(classes.shape, e.what());
    } catch (const DTypeError& e) {
      PyErr_SetString(classes.dtype, e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(classes.device, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(classes.format, e.what());
    } catch (const flexkit::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const flexkit::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(classes.io, e.what());
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(classes.out_of_memory, e.what());
    } catch (const CudaError& e) {
      PyErr_SetString(classes.cuda, e.what());
    } catch (const CompileError& e) {
      PyErr_SetString(classes.compile, e.what());
    } catch (const UnsupportedError& e) {
      PyErr_SetString(classes.unsupported, e.what());
    } catch (const nn::TrainingDiverged& e) {
      PyErr_SetString(classes.diverged, e.what());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory");
    }
  });
}

}  // namespace flexkit::python
