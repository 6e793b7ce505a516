// The PyTorch binding of the example: torch tensors and Python callables in, the narrow interface of
// gpucomm_torch_core.hpp out (all-reduce, MoE plans). Compiled by the host compiler with torch's own flags (no CUDA
// header, no gpucomm header); gpucomm lives in libgpucomm_torch_core.so, built by nvcc (build.py).
#include <torch/extension.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
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

// ---- MoE: the last line of checks before device memory is touched (gpucomm_torch.py checks the
// same with friendlier messages, and keeps the handles) --------------------------------------------

/// t is a contiguous CUDA tensor on `device` of dtype `type` and exactly `shape`.
void expect(at::Tensor const& t, char const* name, int device, at::ScalarType type,
            std::initializer_list<std::int64_t> shape) {
  TORCH_CHECK_VALUE(t.is_cuda() && t.get_device() == device, "gpucomm moe: ", name, " is on ", t.device(),
                    ", the plan on cuda:", device);
  TORCH_CHECK_TYPE(t.scalar_type() == type, "gpucomm moe: ", name, " has dtype ", t.scalar_type(), ", not ", type);
  TORCH_CHECK_VALUE(t.sizes().equals(shape), "gpucomm moe: ", name, " has shape ", t.sizes(), ", not ",
                    at::IntArrayRef(shape));
  TORCH_CHECK_VALUE(t.is_contiguous(), "gpucomm moe: ", name, " is not contiguous");
}

void expect_aligned(at::Tensor const& t, char const* name) {
  TORCH_CHECK_VALUE(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0, "gpucomm moe: ", name,
                    " is not 16-byte aligned (rows move as 16-byte vectors)");
}

std::unique_ptr<gpucomm_torch::moe_plan> make_moe_plan(gpucomm_torch::communicator& c, int experts_per_rank, int hidden,
                                                       int top_k, bool fp8, bool int64_ids, int max_tokens,
                                                       int max_recv_rows, int max_ctas) {
  TORCH_CHECK(!c.closed(), "gpucomm moe_plan: the communicator is closed");
  gpucomm_torch::moe_plan_shape s;
  s.experts_per_rank = experts_per_rank;
  s.hidden = hidden;
  s.top_k = top_k;
  s.tokens = fp8 ? gpucomm_torch::moe_tokens::float8_e4m3 : gpucomm_torch::moe_tokens::bfloat16;
  s.ids = int64_ids ? gpucomm_torch::moe_ids::int64 : gpucomm_torch::moe_ids::int32;
  s.max_tokens = max_tokens;
  s.max_recv_rows = max_recv_rows;
  s.max_ctas = max_ctas;
  return std::make_unique<gpucomm_torch::moe_plan>(c, s);  // collective; the bootstrap calls Python with the GIL
}

long long moe_dispatch(gpucomm_torch::moe_plan& p, at::Tensor const& tokens, at::Tensor const& ids,
                       at::Tensor const& weights, std::int64_t num_tokens, std::optional<at::Tensor> const& count,
                       at::Tensor const& rows, std::optional<at::Tensor> const& scales, at::Tensor const& counts,
                       at::Tensor const& sources, at::Tensor const& row_weights, std::uintptr_t stream) {
  TORCH_CHECK(!p.closed(), "gpucomm moe dispatch: the plan is closed");
  auto const& s = p.shape();
  bool const fp8 = s.tokens == gpucomm_torch::moe_tokens::float8_e4m3;
  int const d = p.device();
  std::int64_t const t = tokens.dim() == 2 ? tokens.size(0) : -1;
  expect(tokens, "tokens", d, at::kBFloat16, {t, s.hidden});
  expect(ids, "topk_ids", d, s.ids == gpucomm_torch::moe_ids::int64 ? at::kLong : at::kInt, {t, s.top_k});
  expect(weights, "topk_weights", d, at::kFloat, {t, s.top_k});
  expect(rows, "recv rows", d, fp8 ? at::kFloat8_e4m3fn : at::kBFloat16, {s.max_recv_rows, s.hidden});
  TORCH_CHECK_VALUE(scales.has_value() == fp8, "gpucomm moe dispatch: recv scales are for fp8 plans, and only those");
  if (fp8) expect(*scales, "recv scales", d, at::kFloat, {s.max_recv_rows, s.hidden / 128});
  expect(counts, "recv counts", d, at::kInt, {s.experts_per_rank});
  expect(sources, "recv sources", d, at::kInt, {s.max_recv_rows, 3});
  expect(row_weights, "recv weights", d, at::kFloat, {s.max_recv_rows});
  expect_aligned(tokens, "tokens");
  expect_aligned(rows, "recv rows");
  if (count) {
    expect(*count, "num_tokens", d, at::kInt, {1});
    TORCH_CHECK_VALUE(t == s.max_tokens,
                      "gpucomm moe dispatch: with a device token count, the inputs hold max_tokens (", s.max_tokens,
                      ") rows, not ", t);
  } else {
    TORCH_CHECK_VALUE(num_tokens >= 0 && num_tokens <= t && num_tokens <= s.max_tokens,
                      "gpucomm moe dispatch: ", num_tokens, " tokens (0 to the ", t,
                      " rows given and max_tokens = ", s.max_tokens, ")");
  }
  gpucomm_torch::moe_dispatch_buffers b;
  b.tokens = tokens.data_ptr();
  b.topk_ids = ids.data_ptr();
  b.topk_weights = weights.data_ptr<float>();
  b.num_tokens = static_cast<int>(num_tokens);
  b.num_tokens_device = count ? count->data_ptr<std::int32_t>() : nullptr;
  b.recv_rows = rows.data_ptr();
  b.recv_scales = fp8 ? scales->data_ptr<float>() : nullptr;
  b.recv_counts = counts.data_ptr<std::int32_t>();
  b.recv_sources = sources.data_ptr<std::int32_t>();
  b.recv_weights = row_weights.data_ptr<float>();
  return p.dispatch(b, stream);
}

void moe_combine(gpucomm_torch::moe_plan& p, long long call, at::Tensor const& expert_rows, at::Tensor const& out,
                 std::uintptr_t stream) {
  TORCH_CHECK(!p.closed(), "gpucomm moe combine: the plan is closed");
  auto const& s = p.shape();
  expect(expert_rows, "expert outputs", p.device(), at::kBFloat16, {s.max_recv_rows, s.hidden});
  expect(out, "out", p.device(), at::kBFloat16, {out.dim() == 2 ? out.size(0) : -1, s.hidden});
  expect_aligned(expert_rows, "expert outputs");
  expect_aligned(out, "out");
  p.combine(call, expert_rows.data_ptr(), out.numel() ? out.data_ptr() : nullptr, static_cast<int>(out.size(0)),
            stream);
}

/// What gpucomm counted on the device since the last call, as gpucomm's message ("" when nothing):
/// gpucomm_torch.py raises it. The wait runs without the GIL.
std::string synchronize(gpucomm_torch::communicator& c) {
  TORCH_CHECK(!c.closed(), "gpucomm synchronize: the communicator is closed");
  py::gil_scoped_release nogil;
  return c.synchronize();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gpucomm all-reduce and MoE dispatch/combine for torch tensors (use the gpucomm_torch Python module)";
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
      .def("synchronize", &synchronize,
           "wait for this process's work on the GPU, then return what gpucomm counted on the device ('' if nothing)")
      .def("close", &gpucomm_torch::communicator::close,
           "close the MoE plans, free the workspace and the world (collective)")
      .def_property_readonly("closed", &gpucomm_torch::communicator::closed)
      .def_property_readonly("rank", &gpucomm_torch::communicator::rank)
      .def_property_readonly("size", &gpucomm_torch::communicator::size)
      .def_property_readonly("device", &gpucomm_torch::communicator::device)
      .def_property_readonly("block_bytes", &gpucomm_torch::communicator::block_bytes)
      .def_property_readonly("parts", &gpucomm_torch::communicator::parts);
  // keep_alive: the communicator (argument 2 of the constructor) outlives its plans' Python objects.
  py::class_<gpucomm_torch::moe_plan>(m, "MoEPlan")
      .def(py::init(&make_moe_plan), py::keep_alive<1, 2>(), py::arg("communicator"), py::arg("experts_per_rank"),
           py::arg("hidden"), py::arg("top_k"), py::arg("fp8"), py::arg("int64_ids"), py::arg("max_tokens"),
           py::arg("max_recv_rows"), py::arg("max_ctas"))
      .def("dispatch", &moe_dispatch, py::arg("tokens"), py::arg("topk_ids"), py::arg("topk_weights"),
           py::arg("num_tokens"), py::arg("num_tokens_device"), py::arg("recv_rows"), py::arg("recv_scales"),
           py::arg("recv_counts"), py::arg("recv_sources"), py::arg("recv_weights"), py::arg("stream"),
           "launch a dispatch on `stream`; returns its call number")
      .def("combine", &moe_combine, py::arg("call"), py::arg("expert_rows"), py::arg("out"), py::arg("stream"),
           "launch the combine of dispatch `call` on `stream`")
      .def("close", &gpucomm_torch::moe_plan::close, "free the plan's workspace (collective)")
      .def_property_readonly("closed", &gpucomm_torch::moe_plan::closed)
      .def_property_readonly("ctas", &gpucomm_torch::moe_plan::ctas)
      .def_property_readonly("workspace_bytes", &gpucomm_torch::moe_plan::workspace_bytes);
}
