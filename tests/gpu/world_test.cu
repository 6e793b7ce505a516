// The host runtime on real GPUs: world construction in this process's mode, the symmetric heap's
// layout and errors (size mismatch, exhaustion, double free, foreign pointers), several worlds in
// one process, world calls keeping the caller's current device, NVLinkStore refusing peers it
// cannot reach, and a kernel from this translation unit next to kernels from the others (no -rdc).
#include "harness.cuh"

#include <cstring>
#include <string>

namespace cg = cooperative_groups;
using gpucomm::test::finish;
using gpucomm::test::for_each_local_pe;

namespace {

__global__ void write_pattern(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<std::uint64_t> p, std::size_t n,
                              std::uint64_t salt) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = gpucomm::test::mix(salt, static_cast<std::uint64_t>(c.my_pe()), i);
}

// Every PE reads every PE's copy through remote() and counts words that are not what that PE wrote.
__global__ void read_everyone(gpucomm::comm<gpucomm::NVLinkStore> c, gpucomm::sym_ptr<std::uint64_t> p, std::size_t n,
                              std::uint64_t salt, unsigned long long* errors) {
  for (int pe = 0; pe < c.npes(); ++pe) {
    std::uint64_t const* theirs = c.remote(p, pe);
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      if (theirs[i] != gpucomm::test::mix(salt, static_cast<std::uint64_t>(pe), i)) atomicAdd(errors, 1ull);
  }
}

using gpucomm::test::error_of;

}  // namespace

TEST_CASE("the world has its PEs on their GPUs and a symmetric heap every PE can read", "[gpu][world]") {
  auto& w = gpucomm::test::the_world();
  int devices = 0;
  GPUCOMM_TEST_CUDA(cudaGetDeviceCount(&devices));
  if (gpucomm::test::under_mpi()) {
    CHECK(w.local_pes().size() == 1);
    CHECK(w.one_process_per_gpu() == (w.npes() > 1));
  } else {
    CHECK(w.npes() == devices * gpucomm::test::pes_per_gpu());
    CHECK(static_cast<int>(w.local_pes().size()) == w.npes());
  }
  std::size_t const n = (std::size_t{3} << 20) / 8 + 5;  // not a whole number of pages
  auto buf = w.alloc<std::uint64_t>(n);
  auto buf2 = w.alloc<std::uint64_t>(17);
  CHECK(buf.size() == n);
  // Same offset in every PE's slot: views differ by exactly the stride.
  for (int pe : w.local_pes()) {
    CHECK(w.view(buf.get(), pe) == buf.ptr(pe));
    CHECK(reinterpret_cast<char*>(buf2.ptr(pe).get()) - reinterpret_cast<char*>(buf.ptr(pe).get()) ==
          reinterpret_cast<char*>(buf2.get().get()) - reinterpret_cast<char*>(buf.get().get()));
  }
  for (int a = 0; a < w.npes(); ++a)
    for (int b = 0; b < w.npes(); ++b) CHECK(w.can_load_store(a, b));
  std::uint64_t const salt = 77;
  for_each_local_pe(w, [&](int pe) {
    write_pattern<<<64, 256, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), buf.ptr(pe), n, salt);
  });
  finish(w);
  w.barrier();
  std::vector<unsigned long long*> errors(static_cast<std::size_t>(w.npes()), nullptr);
  for_each_local_pe(w, [&](int pe) {
    GPUCOMM_TEST_CUDA(cudaMalloc(&errors[pe], sizeof(unsigned long long)));
    GPUCOMM_TEST_CUDA(cudaMemset(errors[pe], 0, sizeof(unsigned long long)));
    read_everyone<<<64, 256, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), buf.ptr(pe), n, salt, errors[pe]);
  });
  finish(w);
  for_each_local_pe(w, [&](int pe) {
    unsigned long long e = 1;
    GPUCOMM_TEST_CUDA(cudaMemcpy(&e, errors[pe], sizeof(e), cudaMemcpyDeviceToHost));
    CHECK(e == 0);
    GPUCOMM_TEST_CUDA(cudaFree(errors[pe]));
  });
  w.barrier();
}

TEST_CASE("the heap reuses freed memory and reports exhaustion, double free and foreign pointers",
          "[gpu][world][errors]") {
  auto& w = gpucomm::test::the_world();
  std::size_t const before = w.heap_bytes_in_use();
  {
    auto a = w.alloc<char>(1 << 20);
    CHECK(w.heap_bytes_in_use() > before);
  }
  CHECK(w.heap_bytes_in_use() == before);  // freed

  // Exhaustion: a clear error, and the heap still works afterwards.
  std::string const exhausted = error_of([&] { w.alloc<char>(w.heap_capacity() + 1); });
  CHECK_THAT(exhausted, Catch::Contains("symmetric heap exhausted") && Catch::Contains("heap_bytes"));
  CHECK(w.heap_bytes_in_use() == before);

  // Double free through the low-level API.
  auto p = w.allocate<int>(100);
  CHECK_NOTHROW(w.deallocate(p));
  CHECK_THAT(error_of([&] { w.deallocate(p); }), Catch::Contains("double free"));

  // A pointer inside an allocation, not at its start.
  auto q = w.allocate<int>(100);
  CHECK_THAT(error_of([&] { w.deallocate(q + 1); }), Catch::Contains("not the start of a live allocation"));
  // A pointer that is not from the heap at all.
  int* foreign = nullptr;
  GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(w.local_pes().front())));
  GPUCOMM_TEST_CUDA(cudaMalloc(&foreign, 64));
  CHECK_THAT(error_of([&] { w.deallocate(gpucomm::sym_ptr<int>(foreign)); }),
             Catch::Contains("not in this world's symmetric heap"));
  GPUCOMM_TEST_CUDA(cudaFree(foreign));
  // Nothing was corrupted: q is still live and can be freed once, and new allocations work.
  CHECK_NOTHROW(w.deallocate(q));
  auto r = w.alloc<double>(1000);
  CHECK(r.size() == 1000);
  r.reset();
  CHECK(w.heap_bytes_in_use() == before);
}

TEST_CASE("allocation sizes that differ across PEs fail on every PE", "[gpu][world][errors]") {
  auto& w = gpucomm::test::the_world();
  if (!w.one_process_per_gpu()) {
    SUCCEED("one process allocates for every PE at once: sizes cannot differ");
    return;
  }
  std::size_t const before = w.heap_bytes_in_use();
  std::size_t const n = 1000 + static_cast<std::size_t>(w.local_pes().front());  // differs on every PE
  CHECK_THAT(error_of([&] { w.alloc<int>(n); }), Catch::Contains("differs across PEs"));
  CHECK(w.heap_bytes_in_use() == before);
  auto ok = w.alloc<int>(1000);  // and the heap still agrees afterwards
  CHECK(ok.size() == 1000);
}

TEST_CASE("several worlds live in one process", "[gpu][world]") {
  auto& w = gpucomm::test::the_world();
  auto other = gpucomm::test::make_world();
  CHECK(other->npes() == w.npes());
  auto a = w.alloc<std::uint64_t>(4096);
  auto b = other->alloc<std::uint64_t>(4096);
  for_each_local_pe(w, [&](int pe) {
    write_pattern<<<8, 256, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), a.ptr(pe), 4096, 1);
    write_pattern<<<8, 256, 0, other->stream(pe)>>>(other->comm<gpucomm::NVLinkStore>(pe), b.ptr(pe), 4096, 2);
  });
  finish(w);
  finish(*other);
  w.barrier();
  other->barrier();
  std::vector<std::uint64_t> host(4096);
  for_each_local_pe(w, [&](int pe) {
    GPUCOMM_TEST_CUDA(cudaMemcpy(host.data(), a.ptr(pe).get(), 4096 * 8, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (std::size_t i = 0; i < 4096; ++i) bad += host[i] != gpucomm::test::mix(1, static_cast<std::uint64_t>(pe), i);
    GPUCOMM_TEST_CUDA(cudaMemcpy(host.data(), b.ptr(pe).get(), 4096 * 8, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < 4096; ++i) bad += host[i] != gpucomm::test::mix(2, static_cast<std::uint64_t>(pe), i);
    CHECK(bad == 0);
  });
  b.reset();
  other.reset();
}

// A world call that visits several GPUs (set-up, mapping a heap block, tear-down) must not leave
// the caller on another one: code after it (a cudaMalloc, a launch without a stream) would land on
// the wrong GPU. Only a process with PEs on two GPUs or more can see a slip; with one GPU it passes.
TEST_CASE("world calls leave the calling thread's current device as they found it", "[gpu][world]") {
  auto& w = gpucomm::test::the_world();
  auto const current = [] {
    int d = -1;
    GPUCOMM_TEST_CUDA(cudaGetDevice(&d));
    return d;
  };
  for (int pe : w.local_pes()) {
    int const mine = w.device(pe);
    INFO("current device " << mine << " (PE " << pe << "'s)");
    GPUCOMM_TEST_CUDA(cudaSetDevice(mine));
    auto other = gpucomm::test::make_world();
    CHECK(current() == mine);
    (void)other->comm<gpucomm::NVLinkStore>(other->local_pes().back());  // the transport's set-up
    CHECK(current() == mine);
    auto block = w.alloc<std::uint64_t>(1024);
    CHECK(current() == mine);
    block.reset();
    CHECK(current() == mine);
    w.synchronize();
    CHECK(current() == mine);
    gpucomm::team const t = w.team_split(w.team_world(), 0, 1, w.npes());
    CHECK(current() == mine);
    w.team_destroy(t);
    CHECK(current() == mine);
    int const last = w.local_pes().back();
    void* buffer = nullptr;
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(last)));
    GPUCOMM_TEST_CUDA(cudaMalloc(&buffer, 4096));
    GPUCOMM_TEST_CUDA(cudaSetDevice(mine));
    w.register_buffer(last, buffer, 4096);
    CHECK(current() == mine);
    w.unregister_buffer(last, buffer);
    CHECK(current() == mine);
    GPUCOMM_TEST_CUDA(cudaSetDevice(w.device(last)));
    GPUCOMM_TEST_CUDA(cudaFree(buffer));
    GPUCOMM_TEST_CUDA(cudaSetDevice(mine));
    other.reset();
    CHECK(current() == mine);
  }
}

TEST_CASE("NVLinkStore refuses a world in which a peer cannot be reached by load/store", "[gpu][world][errors]") {
  auto& w = gpucomm::test::the_world();
  if (w.npes() < 2) {
    SUCCEED("needs two PEs");
    return;
  }
  // PE 0 is kept from mapping PE 1's memory, as if they were on different hosts.
  auto options = gpucomm::test::test_world_options();
  options.heap_bytes = std::size_t{64} << 20;
  options.load_store_filter = [](int from, int to) { return !(from == 0 && to == 1); };
  auto split = gpucomm::test::make_world(options);
  CHECK_FALSE(split->can_load_store(0, 1));
  CHECK(split->can_load_store(1, 0));
  for (int pe : split->local_pes()) {
    std::string const e = error_of([&] { split->comm<gpucomm::NVLinkStore>(pe); });
    if (pe == 0) {
      CHECK_THAT(e, Catch::Contains("PE 1 cannot be reached by load/store from PE 0"));
    } else {
      CHECK(e == "(no error)");
    }
  }
}

TEST_CASE("single-process worlds reject bad device lists and PE counts", "[gpu][world][errors]") {
  if (gpucomm::test::under_mpi()) {
    SUCCEED("single-process construction is checked without MPI");
    return;
  }
  int devices = 0;
  GPUCOMM_TEST_CUDA(cudaGetDeviceCount(&devices));
  CHECK_THAT(error_of([&] { gpucomm::world w({devices}); }), Catch::Contains("does not exist"));
  CHECK_THAT(error_of([&] { gpucomm::world w({0, -1}); }), Catch::Contains("GPU -1 does not exist"));
  gpucomm::world_options o;
  o.expected_pes = devices + 1;
  CHECK_THAT(error_of([&] { gpucomm::world w({}, o); }),
             Catch::Contains("expects " + std::to_string(devices + 1) + " PEs"));
}

TEST_CASE("a GPU listed several times holds several PEs that reach each other by load/store", "[gpu][world]") {
  if (gpucomm::test::under_mpi()) {
    SUCCEED("single-process construction is checked without MPI");
    return;
  }
  gpucomm::world_options o;
  o.heap_bytes = std::size_t{64} << 20;
  int devices = 0;
  GPUCOMM_TEST_CUDA(cudaGetDeviceCount(&devices));
  // Three PEs on GPU 0 and, where there is one, a fourth on GPU 1 between them.
  std::vector<int> list{0, 0, 0};
  if (devices >= 2) list.insert(list.begin() + 1, 1);
  gpucomm::world w(list, o);
  int const npes = w.npes();
  REQUIRE(npes == static_cast<int>(list.size()));
  for (int a = 0; a < npes; ++a) {
    CHECK(w.device(a) == list[static_cast<std::size_t>(a)]);
    for (int b = 0; b < npes; ++b) {
      CHECK(w.same_gpu(a, b) == (list[static_cast<std::size_t>(a)] == list[static_cast<std::size_t>(b)]));
      CHECK(w.same_host(a, b));
      CHECK(w.can_load_store(a, b));
    }
  }
  // Each PE writes its own copy; every PE then reads every copy through remote(): PEs on one GPU
  // have separate memory at separate addresses.
  std::size_t const n = 12345;
  auto buf = w.alloc<std::uint64_t>(n);
  for_each_local_pe(w, [&](int pe) {
    write_pattern<<<8, 256, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), buf.ptr(pe), n, 91);
  });
  finish(w);
  std::vector<unsigned long long*> errors(static_cast<std::size_t>(npes), nullptr);
  for_each_local_pe(w, [&](int pe) {
    GPUCOMM_TEST_CUDA(cudaMalloc(&errors[pe], sizeof(unsigned long long)));
    GPUCOMM_TEST_CUDA(cudaMemset(errors[pe], 0, sizeof(unsigned long long)));
    read_everyone<<<8, 256, 0, w.stream(pe)>>>(w.comm<gpucomm::NVLinkStore>(pe), buf.ptr(pe), n, 91, errors[pe]);
  });
  finish(w);
  for_each_local_pe(w, [&](int pe) {
    unsigned long long e = 1;
    GPUCOMM_TEST_CUDA(cudaMemcpy(&e, errors[pe], sizeof(e), cudaMemcpyDeviceToHost));
    INFO("PE " << pe);
    CHECK(e == 0);
    GPUCOMM_TEST_CUDA(cudaFree(errors[pe]));
  });
}
