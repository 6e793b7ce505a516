// verbs_smoke: the first thing to run on a real mlx5 NIC. verbs_gpu on its own, no world, no
// transport: the host sets up GPU-posted RC QPs (rdma_core_backend, device, qp, memory_region), a
// kernel of one warp posts 64 RDMA WRITEs of 16 KiB and one 8-byte fetch-and-add through send_queue
// and waits for their completion (quiet), and the host checks every byte of the target, the bytes
// after it, the atomic word's old value (fetched) and its new value.
//
//   verbs_smoke loopback [options]            two QPs of one NIC, connected to each other
//   verbs_smoke server <host:port> [options]  the target: owns the buffer, checks it
//   verbs_smoke client <host:port> [options]  the initiator: writes and fetch-adds the server's buffer
//   options: --dev mlx5_0  --ib-port 1  --gpu 0  --gid-family ipv4|ipv6  --gid-index N
//
// Server and client exchange connection_info and the buffer's (address, rkey) over one TCP
// connection; both print PASS or FAIL, and exit with 0 only on PASS. The bring-up order and what
// each set-up error means: docs/guide/ibgda.md, "Running on a real NIC". Not run on hardware in this
// project (no NIC here): it is compiled in CI and checked by reading only.

// Bring-up wants every device-side wait bounded (send_queue::timeout_ns): a doorbell the NIC never
// saw must end as status::timeout with the queue's counters, not as a hung kernel.
#ifndef GPUCOMM_DEBUG
#define GPUCOMM_DEBUG 1
#endif
#include <gpucomm/verbs_gpu/verbs_gpu.cuh>
#include <gpucomm/verbs_gpu/host/rdma_core_backend.hpp>
#include <gpucomm/verbs_gpu/host/setup.hpp>

#include <cooperative_groups.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace cg = cooperative_groups;
namespace vg = gpucomm::verbs_gpu;
namespace vh = gpucomm::verbs_gpu::host;

// ---- what is written where ----------------------------------------------------------------------
constexpr std::uint32_t chunk_bytes = 16384, chunks = 64;  // one batch: 64 WQEs of one WQEBB each
constexpr std::size_t data_bytes = std::size_t{chunk_bytes} * chunks;
constexpr std::size_t guard_bytes = 4096;                      // after the data: must stay poisoned
constexpr std::size_t word_offset = data_bytes + guard_bytes;  // the atomic word, 8-byte aligned
constexpr std::size_t target_bytes = word_offset + 8;          // data, guard, word
constexpr std::size_t source_bytes = data_bytes + 8;           // data, the fetched old value
constexpr std::uint64_t word_before = 0x11223344fffffff0ull;   // the add carries across 32 bits
constexpr std::uint64_t word_add = 0x20;
constexpr std::uint64_t wait_ns = 10'000'000'000ull;

unsigned char pattern(std::size_t i) { return static_cast<unsigned char>((i ^ (i >> 8) ^ (i >> 16)) * 29 + 7); }
// The complement of the pattern: a byte the NIC did not write can never pass the check.
unsigned char poison(std::size_t i) { return static_cast<unsigned char>(~pattern(i)); }

void cuda_check(cudaError_t e, char const* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define CUDA_CHECK(expr) cuda_check((expr), #expr)

struct gpu_buffer {
  void* p = nullptr;
  explicit gpu_buffer(std::size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes)); }
  gpu_buffer(gpu_buffer const&) = delete;
  gpu_buffer& operator=(gpu_buffer const&) = delete;
  ~gpu_buffer() { cudaFree(p); }
  std::uint64_t addr(std::size_t offset = 0) const { return reinterpret_cast<std::uint64_t>(p) + offset; }
};

// ---- the kernel ---------------------------------------------------------------------------------
struct write_chunks {  // WQE i: chunk i of src to chunk i of dst
  vg::local_buf src;
  vg::remote_buf dst;
  __device__ std::uint32_t operator()(vg::wqe_slot const& s, std::uint32_t i) const {
    std::uint64_t const off = std::uint64_t{chunk_bytes} * i;
    return vg::build_rdma_write(s, {src.addr + off, chunk_bytes, src.lkey}, {dst.addr + off, dst.rkey});
  }
};
struct fetch_add_word {
  vg::local_buf result;
  vg::remote_buf word;
  __device__ std::uint32_t operator()(vg::wqe_slot const& s, std::uint32_t) const {
    return vg::build_atomic_fa(s, result, word, word_add);
  }
};
struct outcome {
  vg::status st;
  int step;  // what returned st: 0 posting the WRITEs, 1 posting the fetch-add, 2 quiet
  bool error_cqe;
  vg::cq_error error;
};

__global__ void post_and_wait(vg::send_queue sq, vg::local_buf src, vg::remote_buf dst, vg::local_buf result,
                              vg::remote_buf word, outcome* out) {
  auto const warp = cg::tiled_partition<32>(cg::this_thread_block());
  // One reservation for the 64 WRITEs, each lane builds two, lane 0 publishes and rings.
  int step = 0;
  vg::status st = sq.post(warp, 1, chunks, write_chunks{src, dst});
  if (st == vg::status::ok) {
    step = 1;
    st = sq.post(warp, 1, 1, fetch_add_word{result, word});
  }
  if (warp.thread_rank() != 0) return;
  if (st == vg::status::ok) {
    step = 2;
    st = sq.quiet();  // a signalled NOP behind them; RC completes in order, so its CQE covers all
  }
  *out = outcome{st, step, sq.has_error(), sq.has_error() ? sq.last_error() : vg::cq_error{}};
}

char const* syndrome_hint(std::uint8_t syndrome) {
  switch (static_cast<vg::cqe_syndrome>(syndrome)) {
    case vg::cqe_syndrome::remote_access_err:
      return "the target refused the address or rkey: wrong (addr, rkey) exchanged, or its MR lacks remote access";
    case vg::cqe_syndrome::local_prot_err:
    case vg::cqe_syndrome::local_access_err:
      return "the NIC could not use the local buffer's lkey: the GPU buffer's MR (dma-buf or nvidia-peermem)";
    case vg::cqe_syndrome::transport_retry_exc_err:
      return "no ACK from the peer: the path (LID or GID, MTU, cabling; RoCE: routing, the GID family, PFC)";
    case vg::cqe_syndrome::remote_inval_req_err:
    case vg::cqe_syndrome::remote_op_err:
      return "the responder refused the request: atomics not enabled on its QP, or a misaligned atomic word";
    case vg::cqe_syndrome::local_qp_op_err:
    case vg::cqe_syndrome::local_length_err:
      return "the NIC rejected the WQE itself: a layout this firmware reads differently (report it)";
    default:
      return "see the syndrome in the PRM";
  }
}

/// Launches the kernel on `sq` (src: this side's buffer, dst: the target's) and reports; true when
/// every WQE completed and the fetched old value is right.
bool post_from_gpu(vg::send_queue sq, gpu_buffer const& src, std::uint32_t lkey, std::uint64_t dst,
                   std::uint32_t rkey) {
  sq.timeout_ns = wait_ns;
  gpu_buffer out(sizeof(outcome));
  post_and_wait<<<1, 32>>>(sq, {src.addr(), static_cast<std::uint32_t>(data_bytes), lkey}, {dst, rkey},
                           {src.addr(data_bytes), 8, lkey}, {dst + word_offset, rkey}, static_cast<outcome*>(out.p));
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  outcome o{};
  CUDA_CHECK(cudaMemcpy(&o, out.p, sizeof o, cudaMemcpyDeviceToHost));
  if (o.st != vg::status::ok) {
    static char const* const steps[] = {"posting the WRITEs", "posting the fetch-add", "waiting for completion"};
    std::printf("FAIL: %s: status %s\n", steps[o.step], vg::status_name(o.st));
    if (o.error_cqe) {
      std::printf("  error CQE %s, syndrome %s (vendor syndrome 0x%x), on the %s at WQEBB %u\n  %s\n",
                  o.error.opcode_str(), o.error.syndrome_str(), o.error.vendor_syndrome, o.error.wqe_opcode_str(),
                  o.error.wqe_counter, syndrome_hint(o.error.syndrome));
    } else if (o.st == vg::status::timeout) {
      vg::qp_counters c{};
      CUDA_CHECK(cudaMemcpy(&c, sq.counters, sizeof c, cudaMemcpyDeviceToHost));
      std::printf(
          "  no completion in %llu s: WQEBBs reserved %llu, rung %llu, completed %llu\n"
          "  rung > completed: the doorbell did not reach the NIC (UAR mapping), the NIC could not read the\n"
          "  GPU-resident ring (dma-buf or nvidia-peermem), or the peer never answered (path, peer QP state)\n",
          static_cast<unsigned long long>(wait_ns / 1'000'000'000ull), static_cast<unsigned long long>(c.reserved),
          static_cast<unsigned long long>(c.producer), static_cast<unsigned long long>(c.consumer));
    }
    return false;
  }
  std::uint64_t old = 0;
  CUDA_CHECK(cudaMemcpy(&old, reinterpret_cast<void*>(src.addr(data_bytes)), 8, cudaMemcpyDeviceToHost));
  if (old != word_before) {
    std::printf("FAIL: the fetch-add returned 0x%016llx, expected 0x%016llx\n", static_cast<unsigned long long>(old),
                static_cast<unsigned long long>(word_before));
    return false;
  }
  std::printf("posted %u WRITEs of %u bytes and a fetch-add; all completed, old value right\n", chunks, chunk_bytes);
  return true;
}

// ---- the buffers, before and after ----------------------------------------------------------------
void fill_source(gpu_buffer const& src) {
  std::vector<unsigned char> h(source_bytes, 0xff);  // the fetched value's slot: all ones until it lands
  for (std::size_t i = 0; i < data_bytes; ++i) h[i] = pattern(i);
  CUDA_CHECK(cudaMemcpy(src.p, h.data(), h.size(), cudaMemcpyHostToDevice));
}
void prepare_target(gpu_buffer const& dst) {
  std::vector<unsigned char> h(target_bytes);
  for (std::size_t i = 0; i < word_offset; ++i) h[i] = poison(i);
  std::memcpy(h.data() + word_offset, &word_before, 8);
  CUDA_CHECK(cudaMemcpy(dst.p, h.data(), h.size(), cudaMemcpyHostToDevice));
}
/// Every byte of the data written, the guard untouched, the word added to.
bool check_target(gpu_buffer const& dst) {
  std::vector<unsigned char> h(target_bytes);
  CUDA_CHECK(cudaMemcpy(h.data(), dst.p, h.size(), cudaMemcpyDeviceToHost));
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < word_offset; ++i) {
    if (h[i] != (i < data_bytes ? pattern(i) : poison(i)) && bad++ == 0) first = i;
  }
  if (bad != 0) {
    std::printf("FAIL: %zu of %zu bytes wrong, the first at offset %zu (%s)\n", bad, word_offset, first,
                first >= data_bytes         ? "written past the data"
                : h[first] == poison(first) ? "never written"
                                            : "garbled");
  }
  std::uint64_t word = 0;
  std::memcpy(&word, h.data() + word_offset, 8);
  std::uint64_t const want = word_before + word_add;
  if (word != want) {
    // What a NIC that runs 8-byte atomics on big-endian words would leave (the kernel's mlx5_core
    // asks for host endianness, atomic_caps.atomic_req_8B_endianness_mode, where the device has it).
    bool const big_endian = word == __builtin_bswap64(__builtin_bswap64(word_before) + word_add);
    std::printf("FAIL: the atomic word is 0x%016llx, expected 0x%016llx%s\n", static_cast<unsigned long long>(word),
                static_cast<unsigned long long>(want), big_endian ? " (the NIC added to it as a big-endian word)" : "");
  }
  if (bad == 0 && word == want)
    std::printf("target: %zu bytes written right, guard untouched, word added\n", data_bytes);
  return bad == 0 && word == want;
}

void describe(vh::device const& dev) {
  vh::port_info const& p = dev.port_attr();
  std::string const pci = dev.pci_bus_id().empty() ? "unknown" : dev.pci_bus_id();
  std::printf("NIC %s (PCI %s) port %u: %s", dev.name().c_str(), pci.c_str(), dev.port(),
              p.ethernet ? "RoCE" : "InfiniBand");
  if (p.ethernet) {
    vh::gid_entry const& g = dev.gid();
    std::printf(", GID index %d (RoCE v%d%s)", dev.gid_index(), g.type == vh::gid_type::roce_v2 ? 2 : 1,
                g.ipv4_mapped() ? ", IPv4" : ", IPv6");
  } else {
    std::printf(", LID 0x%x", p.lid);
  }
  std::printf("; dma-buf %s, nvidia-peermem %s\n", dev.dmabuf() ? "yes" : "no", dev.peermem() ? "yes" : "no");
}

// ---- two nodes: one TCP connection ---------------------------------------------------------------
struct hello {  // what each side tells the other (both run on the same architecture)
  vh::connection_info qp;
  std::uint64_t addr = 0, bytes = 0;  // this side's buffer
  std::uint32_t rkey = 0, reserved = 0;
};
static_assert(std::is_trivially_copyable_v<hello>);

struct socket_fd {
  int fd = -1;
  socket_fd() = default;
  explicit socket_fd(int f) : fd(f) {}
  socket_fd(socket_fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  socket_fd& operator=(socket_fd&&) = delete;
  ~socket_fd() {
    if (fd >= 0) ::close(fd);
  }
};
[[noreturn]] void sys_fail(std::string const& what) { throw std::runtime_error(what + ": " + std::strerror(errno)); }

/// host:port ("[fe80::1]:18515" for IPv6) resolved; passive: for listening (host may be empty).
std::unique_ptr<addrinfo, void (*)(addrinfo*)> resolve(std::string const& endpoint, bool passive) {
  std::size_t const colon = endpoint.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("expected host:port, got \"" + endpoint + "\"");
  std::string host = endpoint.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  if (int const rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), endpoint.c_str() + colon + 1, &hints, &list))
    throw std::runtime_error("getaddrinfo(" + endpoint + "): " + ::gai_strerror(rc));
  return {list, ::freeaddrinfo};
}
socket_fd accept_one(std::string const& endpoint) {
  auto const list = resolve(endpoint, true);
  socket_fd s(::socket(list->ai_family, list->ai_socktype, list->ai_protocol));
  int const one = 1;
  if (s.fd < 0 || ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      ::bind(s.fd, list->ai_addr, list->ai_addrlen) != 0 || ::listen(s.fd, 1) != 0)
    sys_fail("listening on " + endpoint);
  std::printf("waiting for the client on %s\n", endpoint.c_str());
  socket_fd c(::accept(s.fd, nullptr, nullptr));
  if (c.fd < 0) sys_fail("accept");
  return c;
}
socket_fd connect_to(std::string const& endpoint) {
  auto const list = resolve(endpoint, false);
  for (int attempt = 0;; ++attempt) {  // the server may still be setting up: retry for a minute
    socket_fd s(::socket(list->ai_family, list->ai_socktype, list->ai_protocol));
    if (s.fd < 0) sys_fail("socket");
    if (::connect(s.fd, list->ai_addr, list->ai_addrlen) == 0) return s;
    if (attempt == 60 || (errno != ECONNREFUSED && errno != ETIMEDOUT)) sys_fail("connecting to " + endpoint);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}
void send_all(socket_fd const& s, void const* p, std::size_t n) {
  for (auto const* b = static_cast<char const*>(p); n > 0;) {
    ssize_t const k = ::send(s.fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) sys_fail("send to the peer");
    b += k;
    n -= static_cast<std::size_t>(k);
  }
}
void recv_all(socket_fd const& s, void* p, std::size_t n) {
  for (auto* b = static_cast<char*>(p); n > 0;) {
    ssize_t const k = ::recv(s.fd, b, n, 0);
    if (k == 0) throw std::runtime_error("the peer closed the connection (it failed: see its output)");
    if (k < 0) sys_fail("recv from the peer");
    b += k;
    n -= static_cast<std::size_t>(k);
  }
}
hello swap_hello(socket_fd const& s, hello const& mine) {
  hello peer;
  send_all(s, &mine, sizeof mine);
  recv_all(s, &peer, sizeof peer);
  return peer;
}
void send_flag(socket_fd const& s, bool v) {
  unsigned char const b = v ? 1 : 0;
  send_all(s, &b, 1);
}
bool recv_flag(socket_fd const& s) {
  unsigned char b = 0;
  recv_all(s, &b, 1);
  return b == 1;
}

// ---- the three modes --------------------------------------------------------------------------------
struct options {
  std::string mode, endpoint;
  vh::device_options dev;
  int gpu = 0;
};

bool loopback(options const& o) {
  vh::rdma_core_backend nic;
  vh::device dev(nic, o.dev);
  describe(dev);
  vh::qp a(dev), b(dev);  // a posts, b answers
  a.connect(b.local_info());
  b.connect(a.local_info());
  std::printf("QP 0x%x -> QP 0x%x, loopback\n", a.qpn(), b.qpn());
  gpu_buffer src(source_bytes), dst(target_bytes);
  fill_source(src);
  prepare_target(dst);
  vh::memory_region src_mr(dev, src.p, source_bytes, true), dst_mr(dev, dst.p, target_bytes, true);
  bool const posted = post_from_gpu(a.send_queue(), src, src_mr.lkey(), dst.addr(), dst_mr.rkey());
  bool const landed = check_target(dst);
  return posted && landed;
}

bool server(options const& o) {
  vh::rdma_core_backend nic;
  vh::device dev(nic, o.dev);
  describe(dev);
  vh::qp q(dev);
  gpu_buffer dst(target_bytes);
  prepare_target(dst);
  vh::memory_region mr(dev, dst.p, target_bytes, true);
  socket_fd const s = accept_one(o.endpoint);
  hello const peer = swap_hello(s, {q.local_info(), dst.addr(), target_bytes, mr.rkey(), 0});
  q.connect(peer.qp);
  std::printf("QP 0x%x <- QP 0x%x\n", q.qpn(), peer.qp.qpn);
  send_flag(s, true);  // our QP is past RTR: the client may post
  bool const client_ok = recv_flag(s);
  bool const landed = check_target(dst);
  send_flag(s, landed);
  if (!client_ok) std::printf("FAIL: the client's WQEs did not all complete (see its output)\n");
  return client_ok && landed;
}

bool client(options const& o) {
  vh::rdma_core_backend nic;
  vh::device dev(nic, o.dev);
  describe(dev);
  vh::qp q(dev);
  gpu_buffer src(source_bytes);
  fill_source(src);
  vh::memory_region mr(dev, src.p, source_bytes, true);
  socket_fd const s = connect_to(o.endpoint);
  hello const peer = swap_hello(s, {q.local_info(), src.addr(), source_bytes, mr.rkey(), 0});
  if (peer.bytes != target_bytes) throw std::runtime_error("the server's buffer has another size: another version?");
  q.connect(peer.qp);
  std::printf("QP 0x%x -> QP 0x%x\n", q.qpn(), peer.qp.qpn);
  if (!recv_flag(s)) throw std::runtime_error("the server did not get ready");
  bool const posted = post_from_gpu(q.send_queue(), src, mr.lkey(), peer.addr, peer.rkey);
  send_flag(s, posted);
  bool const landed = recv_flag(s);
  if (!landed) std::printf("FAIL: the server found its buffer wrong (see its output)\n");
  return posted && landed;
}

options parse(int argc, char** argv) {
  options o;
  int i = 1;
  if (i < argc) o.mode = argv[i++];
  if (o.mode == "server" || o.mode == "client") {
    if (i == argc) throw std::invalid_argument(o.mode + " needs <host:port>");
    o.endpoint = argv[i++];
  } else if (o.mode != "loopback") {
    throw std::invalid_argument("the mode is loopback, server or client");
  }
  for (; i < argc; ++i) {
    std::string const a = argv[i];
    if (i + 1 == argc) throw std::invalid_argument(a + " needs a value");
    std::string const v = argv[++i];
    if (a == "--dev") {
      o.dev.name = v;
    } else if (a == "--ib-port") {
      o.dev.port = static_cast<std::uint8_t>(std::stoi(v));
    } else if (a == "--gpu") {
      o.gpu = std::stoi(v);
    } else if (a == "--gid-index") {
      o.dev.gid_index = std::stoi(v);
    } else if (a == "--gid-family" && (v == "ipv4" || v == "ipv6")) {
      o.dev.gid_family = v == "ipv4" ? vh::ip_family::ipv4 : vh::ip_family::ipv6;
    } else {
      throw std::invalid_argument("unknown option " + a + " " + v);
    }
  }
  return o;
}

int main(int argc, char** argv) {
  options o;
  try {
    o = parse(argc, argv);
  } catch (std::exception const& e) {
    std::fprintf(stderr,
                 "%s\nusage: verbs_smoke loopback | server <host:port> | client <host:port>\n"
                 "       [--dev mlx5_0] [--ib-port 1] [--gpu 0] [--gid-family ipv4|ipv6] [--gid-index N]\n",
                 e.what());
    return 2;
  }
  try {
    CUDA_CHECK(cudaSetDevice(o.gpu));  // the set-up puts the queues on the current GPU, picks the NIC nearest it
    bool const pass = o.mode == "loopback" ? loopback(o) : o.mode == "server" ? server(o) : client(o);
    std::printf("%s\n", pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
  } catch (vh::setup_error const& e) {
    // what() names the call, its error and, after " -- ", what to try.
    std::printf(
        "%s\nFAIL in the set-up: docs/guide/ibgda.md, \"Running on a real NIC\", says what each message means\n",
        e.what());
  } catch (std::exception const& e) {
    std::printf("%s\nFAIL\n", e.what());
  }
  return 1;
}
