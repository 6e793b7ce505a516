#pragma once
// A part's share of a collective as a sequence of chunks, one block of each member's data per
// chunk, in the protocol the transport runs best: channel steps where its threads store to every
// member (detail/channels.cuh: pipelined, no fence or quiet), rounds of put_signal elsewhere
// (detail/rounds.cuh). broadcast, reduce, allgather, alltoall, reduce_scatter and the one-shot
// allreduce are each one call of run_chunks.

#include <cstddef>
#include <cstdint>

#include "channels.cuh"
#include "rounds.cuh"

namespace gpucomm {

#if defined(__CUDACC__)

namespace detail {

/// Runs this part's share of [0, n) in chunks of at most one block of T (a channel block in channel
/// steps), in order. For chunk
/// `at` (elements of the message): send(at, r) is this member's data for team rank r (a
/// round_send; nothing: a bare flag); once every member's block of it is here, complete(at, in)
/// reads them, in(r) being team rank r's block (r != this rank). want(r): whether this member
/// needs r's data at all (rounds wait only for those; channel steps hear from every member anyway).
/// complete may write what no later send reads: channel steps push chunk j + 1 before they
/// complete chunk j.
template <class T, class Tr, group G, class Send, class Want, class Complete>
__device__ void run_chunks(comm<Tr> const& c, G const& g, round_context const& x, std::size_t n, Send&& send,
                           Want&& want, Complete&& complete) {
  element_range const mine = x.share(n);
  std::size_t const per_chunk = load_stores_everywhere<Tr> ? x.channel_elements<T>() : x.block_elements<T>();
  auto chunk = [&](std::size_t j) {
    element_range const at = chunk_of(mine.size(), j, per_chunk);
    return element_range{mine.lo + at.lo, mine.lo + at.hi};
  };
  std::size_t const chunks = rounds_for(mine.size(), per_chunk);
  if constexpr (load_stores_everywhere<Tr>) {
    (void)want;
    run_channel<T>(
        c, g, x, chunks, [&](std::size_t j, int r) { return send(chunk(j), r); },
        [&](std::size_t j, std::uint64_t step) {
          complete(chunk(j),
                   [&](int r) { return reinterpret_cast<T const*>(x.ws.channel_block(x.part, step, r, x.rank)); });
        },
        [](std::size_t) { return false; });
  } else {
    for (std::size_t j = 0; j < chunks; ++j) {
      element_range const at = chunk(j);
      std::uint64_t const round = run_round<T>(
          c, g, x, [&](int r) { return send(at, r); }, want);
      complete(at, [&](int r) -> T const* { return x.block<T>(round, r); });
    }
  }
}

/// Every member sends every other member r the n elements at source(r), and receives rank r's
/// into dst + r * n (its own block copied locally). allgather: source(r) = src; alltoall:
/// source(r) = src + r * n.
template <class T, class Tr, group G, class Source>
__device__ void exchange_blocks(comm<Tr> const& c, G const& g, round_context const& x, T* dst, std::size_t n,
                                Source&& source) {
  element_range const mine = x.share(n);
  copy_elements(g, dst + static_cast<std::size_t>(x.rank) * n + mine.lo, source(x.rank) + mine.lo, mine.size());
  run_chunks<T>(
      c, g, x, n,
      [&](element_range at, int r) {
        return round_send<T>{source(r) + at.lo, at.size()};
      },
      [](int) { return true; },
      [&](element_range at, auto&& in) {
        for (int r = 0; r < x.size; ++r)
          if (r != x.rank)
            copy_elements<copy_depth::deep>(g, dst + static_cast<std::size_t>(r) * n + at.lo, in(r), at.size());
      });
}

/// Every member sends every other member r the n elements at source(r), and folds what it
/// receives with its own source(rank) into dst, each element through the epilogue
/// (epilogue.cuh). reduce_scatter: source(r) = src + r * n; the one-shot allreduce: source(r) = src.
template <class Op, class T, class Tr, group G, class Source, class Epilogue = identity_epilogue>
__device__ void fold_blocks(comm<Tr> const& c, G const& g, round_context const& x, T* dst, std::size_t n,
                            Source&& source, Epilogue const& epilogue = {}) {
  run_chunks<T>(
      c, g, x, n,
      [&](element_range at, int r) {
        return round_send<T>{source(r) + at.lo, at.size()};
      },
      [](int) { return true; },
      [&](element_range at, auto&& in) {
        T const* const own = source(x.rank) + at.lo;
        fold_ranks<Op>(
            g, dst + at.lo, at.size(), x.size, [&](int r) { return r == x.rank ? own : in(r); },
            [&](std::size_t i, T v) { return epilogue(at.lo + i, v); });
      });
}

}  // namespace detail

#endif  // __CUDACC__

}  // namespace gpucomm
