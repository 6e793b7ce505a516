// The PyTorch binding of the example: torch tensors and Python callables in, the narrow interface of
// gpucomm_torch_core.hpp out. Compiled by the host compiler with torch's own flags (no CUDA header,
// no gpucomm header); gpucomm lives in libgpucomm_torch_core.so, built by nvcc (build.py).
#include <torch/extension.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "gpucomm_torch_core.hpp"

namespace py = pybind11;

namespace {

bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// A Python callable kept by C++ code that may call it, copy it or drop it with or without the GIL
// (gpucomm keeps the bootstrap inside its world): every touch of the Python object takes the GIL,
// and once the interpreter is finalizing the object is left alone.
std::shared_ptr<py::function> keep(py::function f) {
  return std::shared_ptr<py::function>(new py::function(std::move(f)), [](py::function* p) {
    if (Py_IsInitialized() && !python_finalizing()) {
      py::gil_scoped_acquire gil;
      delete p;
    } else {
      p->release();  // leak the reference: Python is going away
      delete p;
    }
  });
}

void check_python_alive(char const* what) {
  if (!Py_IsInitialized() || python_finalizing())
    throw std::runtime_error(std::string("gpucomm_torch: ") + what +
                             " needs Python, which is shutting down: call Communicator.close() on every rank before "
                             "the interpreter exits");
}

gpucomm_torch::bootstrap_callbacks callbacks(py::function allgather, py::function barrier, int size) {
  gpucomm_torch::bootstrap_callbacks cb;
  cb.allgather = [f = keep(std::move(allgather)), size](void const* send, void* recv, std::size_t bytes) {
    check_python_alive("the bootstrap's allgather");
    py::gil_scoped_acquire gil;
    py::object const result = (*f)(py::bytes(static_cast<char const*>(send), bytes));
    char* data = nullptr;
    Py_ssize_t length = 0;
    if (!PyBytes_Check(result.ptr()) || PyBytes_AsStringAndSize(result.ptr(), &data, &length) != 0)
      throw std::runtime_error("gpucomm_torch: the bootstrap's allgather must return bytes");
    if (static_cast<std::size_t>(length) != bytes * static_cast<std::size_t>(size)) {
      throw std::runtime_error("gpucomm_torch: the bootstrap's allgather returned " + std::to_string(length) +
                               " bytes, expected " + std::to_string(bytes) + " x " + std::to_string(size));
    }
    if (length) std::memcpy(recv, data, static_cast<std::size_t>(length));
  };
  cb.barrier = [f = keep(std::move(barrier))] {
    check_python_alive("the bootstrap's barrier");
    py::gil_scoped_acquire gil;
    (*f)();
  };
  return cb;
}

gpucomm_torch::element element_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return gpucomm_torch::element::float32;
    case at::kHalf:
      return gpucomm_torch::element::float16;
    case at::kBFloat16:
      return gpucomm_torch::element::bfloat16;
    case at::kDouble:
      return gpucomm_torch::element::float64;
    case at::kInt:
      return gpucomm_torch::element::int32;
    case at::kLong:
      return gpucomm_torch::element::int64;
    case at::kChar:
      return gpucomm_torch::element::int8;
    case at::kByte:
      return gpucomm_torch::element::uint8;
    default:
      break;
  }
  TORCH_CHECK_TYPE(false, "gpucomm all_reduce: unsupported dtype ", t,
                   " (supported: float32, float16, bfloat16, float64, int32, int64, int8, uint8)");
  return gpucomm_torch::element::float32;  // not reached
}

void all_reduce(gpucomm_torch::communicator& c, at::Tensor const& dst, at::Tensor const& src, std::uintptr_t stream) {
  TORCH_CHECK(!c.closed(), "gpucomm all_reduce: the communicator is closed");
  for (auto const* t : {&dst, &src}) {
    char const* const name = t == &dst ? "output" : "input";
    TORCH_CHECK_VALUE(t->is_cuda(), "gpucomm all_reduce: the ", name, " tensor is on ", t->device(),
                      ", not on a CUDA device");
    TORCH_CHECK_VALUE(t->get_device() == c.device(), "gpucomm all_reduce: the ", name,
                      " tensor is on cuda:", t->get_device(), ", the communicator on cuda:", c.device());
    TORCH_CHECK_VALUE(t->is_contiguous(), "gpucomm all_reduce: the ", name, " tensor is not contiguous");
  }
  TORCH_CHECK_TYPE(dst.scalar_type() == src.scalar_type(), "gpucomm all_reduce: output dtype ", dst.scalar_type(),
                   " differs from input dtype ", src.scalar_type());
  TORCH_CHECK_VALUE(dst.numel() == src.numel(), "gpucomm all_reduce: output has ", dst.numel(), " elements, input ",
                    src.numel());
  auto const type = element_of(src.scalar_type());
  std::size_t const n = static_cast<std::size_t>(src.numel());
  if (n == 0) return;
  auto const* const s = static_cast<char const*>(src.data_ptr());
  auto* const d = static_cast<char*>(dst.data_ptr());
  std::size_t const bytes = n * src.element_size();
  TORCH_CHECK_VALUE(d == s || d + bytes <= s || s + bytes <= d,
                    "gpucomm all_reduce: input and output overlap without being the same memory");
  c.all_reduce(d, s, n, type, stream);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gpucomm all-reduce for torch tensors (use the gpucomm_torch Python module, not this one)";
  py::class_<gpucomm_torch::communicator>(m, "Communicator")
      .def(py::init([](int rank, int size, int device, py::function allgather, py::function barrier,
                       std::size_t block_bytes, int parts, std::size_t heap_bytes) {
             gpucomm_torch::communicator_options o;
             o.block_bytes = block_bytes;
             o.parts = parts;
             o.heap_bytes = heap_bytes;
             // The bootstrap calls back into Python with the GIL, which this thread holds throughout.
             return std::make_unique<gpucomm_torch::communicator>(
                 rank, size, device, callbacks(std::move(allgather), std::move(barrier), size), o);
           }),
           py::arg("rank"), py::arg("size"), py::arg("device"), py::arg("allgather"), py::arg("barrier"),
           py::arg("block_bytes"), py::arg("parts"), py::arg("heap_bytes"))
      .def("all_reduce", &all_reduce, py::arg("output"), py::arg("input"), py::arg("stream"),
           "output = sum over ranks of input (output may be input), launched on `stream` (cudaStream_t as int)")
      .def("close", &gpucomm_torch::communicator::close, "free the workspace and the world (collective)")
      .def_property_readonly("closed", &gpucomm_torch::communicator::closed)
      .def_property_readonly("rank", &gpucomm_torch::communicator::rank)
      .def_property_readonly("size", &gpucomm_torch::communicator::size)
      .def_property_readonly("device", &gpucomm_torch::communicator::device)
      .def_property_readonly("block_bytes", &gpucomm_torch::communicator::block_bytes)
      .def_property_readonly("parts", &gpucomm_torch::communicator::parts);
}
