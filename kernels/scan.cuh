// SPDX-License-Identifier: Apache-2.0
// gpu::LaunchScan: the CUDA launcher of scan ops (see kernels/scan.h).
//
//   gpu::LaunchScan<T>(fn, rows, cols, reverse, stream, out, x, y, ...);
//
// The operator is the function object's (`Fn::Op`, a sum when it names none). Three paths,
// chosen by shape at launch, with 64-bit indices and every launch checked:
//   - short rows (cols < kScanBlockMinCols): ScanWarpRowsKernel, a group of kLanes lanes (4 to
//     32, from the row length) per row, several rows per block: each lane takes kScanItems
//     elements of a tile of kLanes x kScanItems (a run of them, combined by the lane before the
//     group scans the lanes' totals with shuffles; lane-strided, a scan per element, for a large
//     state) and the tile's total is carried to the next tile;
//   - long rows, many of them: ScanRowsKernel, one block of kScanThreads threads per row (a
//     grid-stride loop over rows): the row taken in tiles of kScanThreads x kScanBlockItems<C>
//     elements, cub::BlockScan scanning each and a running prefix carried from tile to tile;
//   - long rows, too few of them to fill the GPU a block each (fewer than kScanFewRowsPerSm per
//     multiprocessor): TileScanKernel, one pass over tiles of kScanTileThreads x
//     kScanTileItems<C> elements, a block per tile, each tile's prefix found by a look-back over
//     the totals and prefixes the tiles before it publish in a workspace (TileStates: 8 bytes a
//     tile for a 4-byte state, a float's; 16 for an 8-byte one, a double's or a float product's;
//     40 for a float64 product's; zeroed before the launch). The workspace comes from the
//     calling framework's allocator; a caller that publishes none (CuPy) gets the block-per-row
//     path.
// Every combination happens in an order that the shape alone fixes (the look-back's included:
// see ChainedPrefix), so the same input gives the same bits on every run. The kernels combine in
// the operator's state (ScanCarry, kernels/scan.h): C for most, m * 2^e for a product.
#ifndef SCALE_LIB_KERNELS_SCAN_CUH_
#define SCALE_LIB_KERNELS_SCAN_CUH_

#include <cub/block/block_exchange.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/atomic>
#include <cuda/std/bit>

#include <cstdint>
#include <type_traits>

#include "cuda_float.cuh"
#include "scan.h"

namespace scale_lib {
namespace gpu {

inline constexpr int kScanThreads = 256;
inline constexpr int kScanItems = 4;  // elements per thread and tile on the warp path
// The block path's: 16 bytes of values a thread (4 floats, 2 doubles), so that a warp's loads
// span 512 bytes whatever the type (with 4 doubles a thread, float64 rows of 2^10 to 2^13 ran at
// 53-59% of copy's bandwidth on an H100, float32 at 89%).
inline constexpr int kScanBlockItemBytes = 16;
template <typename C>
inline constexpr int kScanBlockItems = kScanBlockItemBytes / static_cast<int>(sizeof(C));
// Rows of fewer elements take the warp path; a block per row leaves most of its threads idle.
inline constexpr int64_t kScanBlockMinCols = 1024;
// The tiled path, taken when the rows are fewer than kScanFewRowsPerSm per multiprocessor and
// each row has at least two tiles: tiles of kScanTileThreads x kScanTileItems<C> elements
// (kScanTileBytes of values a thread, 28 floats; kScanTileBytesDouble, 21 doubles; 16-bit inputs
// are scanned in float). A tile's look-back runs on the critical path of every later tile, so
// tiles are large: on an H100, float32 (1, 2^24) took 68 us with tiles of 7168, 72 with 6144 and
// 80 with 4096 (with the look-back before its windows). Double tiles hold more bytes: float64 (1,
// 2^24) took 122 us with 14 doubles a thread, 114 with 18 and 110 with 21 (float32 gained nothing
// from 42 floats). A tile passes through shared memory (BlockExchange), under the 48 KB a kernel
// may declare.
inline constexpr int kScanTileThreads = 256;
inline constexpr int kScanTileBytes = 112;
inline constexpr int kScanTileBytesDouble = 168;
template <typename C>
inline constexpr int kScanTileItems =
    (sizeof(C) == 8 ? kScanTileBytesDouble : kScanTileBytes) / static_cast<int>(sizeof(C));
template <typename C>
inline constexpr int64_t kScanTile = int64_t{kScanTileThreads} * kScanTileItems<C>;
inline constexpr int64_t kScanFewRowsPerSm = 4;
// The tiled path's launch bounds: as many blocks per multiprocessor as a thread's values (C) and
// state (S) leave registers for. More tiles in flight keep more loads in flight. Tuned on an
// H100 (shared memory holds three of the float blocks on GPUs with 100 KB a multiprocessor, two
// on sm_75, whatever the bound says):
//   - a 4-byte state (a float's sum, max or min): four blocks, 64 registers a thread for a sum;
//     float32 (1, 2^24) took 67-68 us against 72-74 with the 72 registers that let three run,
//     bfloat16 54 against 62-64;
//   - a float's product (an 8-byte state): three, 80 registers; (16, 2^20) 95-96 against 114-115
//     with two, (512, 2^15) 83-84 against 100;
//   - any other (a double's sum or product, a larger state): two; a float64 sum took 112-113
//     with four, 110-112 with two.
template <typename C, typename S>
inline constexpr int kScanTileBlocksPerSmOf =
    sizeof(S) == 4 ? 4 : (sizeof(S) == 8 && sizeof(C) == 4 ? 3 : 2);
// The look-back keeps up to this many windows' totals (one state each) in shared memory, more
// than the blocks in flight span (on an H100, up to 4 x 132 tiles: 17 windows). With as many
// kept it waits for the P of the window before them (ChainedPrefix), with the same bits as a
// result.
inline constexpr int kScanLookBackWindows = 32;
// The warp path takes a tile in runs (each lane's elements consecutive, combined in order by the
// lane, then one scan of the lanes' totals) for a state of up to this many bytes, and
// lane-strided (a scan across the lanes per element a lane holds) for a larger one, which the
// runs' longer chain of combinations made slower: on an H100, (65536, 128) float32 products took
// 39 us in runs against 52-53 strided, float64 products (a 16-byte state) 82 against 73.
inline constexpr int kScanRunsMaxStateBytes = 8;

// The index of the j-th element along the scan of the row starting at `base`.
__device__ __forceinline__ int64_t ScanIndex(int64_t base, int64_t cols, int64_t j, bool reverse) {
  return base + (reverse ? cols - 1 - j : j);
}

// A warp shuffle (`shuffle`, a __shfl_*_sync of one value) of a state of any type: a word at a
// time where it is not a number.
template <typename S, typename Shuffle>
__device__ __forceinline__ S ShuffleState(S value, const Shuffle& shuffle) {
  if constexpr (std::is_arithmetic_v<S>) {
    return shuffle(value);
  } else {
    static_assert(sizeof(S) % 4 == 0, "a scan state of whole 32-bit words");
    unsigned words[sizeof(S) / 4];
    memcpy(words, &value, sizeof(S));
#pragma unroll
    for (unsigned& w : words) w = shuffle(w);
    memcpy(&value, words, sizeof(S));
    return value;
  }
}

// The value of the lane `delta` below in each group of kLanes lanes (a lane's own below
// `delta`; every lane of the warp calls it).
template <int kLanes, typename S>
__device__ __forceinline__ S ShuffleUp(S value, int delta) {
  return ShuffleState(value, [&](auto v) { return __shfl_up_sync(0xffffffffu, v, delta, kLanes); });
}

// Inclusive scans across groups of kLanes lanes (a power of two up to 32), one per value
// (independent, interleaved): each lane's result combined in a grouping fixed by its index, so
// the bits depend on the values alone. Every lane of the warp runs every shuffle.
template <int kLanes, typename S, typename Op, int N>
__device__ __forceinline__ void WarpInclusiveScan(S (&values)[N], int lane, const Op& op) {
  static_assert(kLanes >= 2 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0);
#pragma unroll
  for (int d = 1; d < kLanes; d *= 2) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const S before = ShuffleUp<kLanes>(values[k], d);
      if (lane >= d) values[k] = op(before, values[k]);
    }
  }
}
template <int kLanes, typename S, typename Op>
__device__ __forceinline__ S WarpInclusiveScan(S value, int lane, const Op& op) {
  S values[1] = {value};
  WarpInclusiveScan<kLanes>(values, lane, op);
  return values[0];
}

// The value of lane `source` of each group of kLanes lanes (every lane of the warp calls it).
template <int kLanes, typename S>
__device__ __forceinline__ S FromLane(S value, int source) {
  return ShuffleState(value, [&](auto v) { return __shfl_sync(0xffffffffu, v, source, kLanes); });
}

// [scan_prefix.begin]
// cub's block prefix callback: the first warp calls it once per tile with the tile's total and
// gets back what comes before the tile, the combination of the row's earlier tiles.
template <typename S, typename Op>
struct RunningPrefix {
  S total;
  Op op;
  __device__ S operator()(S tile_total) {
    const S before = total;
    total = Settled<Op>(op(total, tile_total));
    return before;
  }
};
// [scan_prefix.end]

// [scan_kernel.begin]
template <typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanThreads)
    ScanRowsKernel(Fn fn, int64_t rows, int64_t cols, bool reverse, T* __restrict__ out,
                   const In*... ins) {
  AwaitPriorKernels();
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Carry = ScanCarry<Op, C>;
  using S = typename Carry::State;
  using Scan = cub::BlockScan<S, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  constexpr int kItems = kScanBlockItems<C>;
  static_assert(kItems >= 1, "ScanRowsKernel: a compute type of at most kScanBlockItemBytes");
  constexpr int64_t kTile = int64_t{kScanThreads} * kItems;
  const Op op{};
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * cols;
    RunningPrefix<S, Op> prefix{Op::Identity(), op};
    for (int64_t tile = 0; tile < cols; tile += kTile) {
      const int64_t first = tile + int64_t{threadIdx.x} * kItems;  // along the scan
      S values[kItems];
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t j = first + k;
        values[k] = j < cols
                        ? Carry::Lift(fn.Value(M::Load(ins[ScanIndex(base, cols, j, reverse)])...))
                        : Op::Identity();
      }
      Scan(temp).InclusiveScan(values, values, op, prefix);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t j = first + k;
        if (j < cols)
          out[ScanIndex(base, cols, j, reverse)] = M::Store(fn.Finish(Carry::Lower(values[k])));
      }
      __syncthreads();  // temp is reused by the next tile
    }
  }
}
// [scan_kernel.end]

// [scan_warp.begin]
// kLanes lanes (a power of two up to 32) per row, kScanThreads / kLanes rows per block, a tile of
// a row kLanes x kScanItems elements. A state of up to kScanRunsMaxStateBytes (a float's sum or
// product, a double's sum) takes the tile in runs: each lane's kScanItems elements consecutive,
// combined in order by the lane; one scan of the lanes' totals across the group; then each lane
// combines the carry and the lanes before it with its own. A larger one (a double's product)
// takes it lane-strided: one scan across the group per item, then the items in order. Every lane
// of a warp runs every shuffle (rows past the end scan identities), so the full mask holds.
template <int kLanes, typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(kScanThreads)
    ScanWarpRowsKernel(Fn fn, int64_t rows, int64_t cols, bool reverse, T* __restrict__ out,
                       const In*... ins) {
  AwaitPriorKernels();
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Carry = ScanCarry<Op, C>;
  using S = typename Carry::State;
  constexpr bool kRuns = sizeof(S) <= kScanRunsMaxStateBytes;
  constexpr int kRowsPerBlock = kScanThreads / kLanes;
  constexpr int64_t kTile = int64_t{kLanes} * kScanItems;
  const Op op{};
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int group = static_cast<int>(threadIdx.x) / kLanes;
  // The k-th element of the lane in the tile starting at `tile`, along the scan.
  const auto element = [&](int64_t tile, int k) {
    return kRuns ? tile + int64_t{lane} * kScanItems + k : tile + int64_t{k} * kLanes + lane;
  };
  for (int64_t first_row = int64_t{blockIdx.x} * kRowsPerBlock; first_row < rows;
       first_row += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t row = first_row + group;
    const bool active = row < rows;
    const int64_t base = row * cols;
    S carry = Op::Identity();  // the combination of the row's earlier tiles
    for (int64_t tile = 0; tile < cols; tile += kTile) {
      S values[kScanItems];
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = element(tile, k);
        values[k] = active && j < cols
                        ? Carry::Lift(fn.Value(M::Load(ins[ScanIndex(base, cols, j, reverse)])...))
                        : Op::Identity();
      }
      if constexpr (kRuns) {
#pragma unroll
        for (int k = 1; k < kScanItems; ++k) values[k] = op(values[k - 1], values[k]);
        // The lanes' runs, up to each lane.
        const S up_to_lane = WarpInclusiveScan<kLanes>(values[kScanItems - 1], lane, op);
        const S before_lane = ShuffleUp<kLanes>(up_to_lane, 1);
        const S before = lane == 0 ? carry : op(carry, before_lane);
#pragma unroll
        for (int k = 0; k < kScanItems; ++k) values[k] = op(before, values[k]);
        carry = Settled<Op>(op(carry, FromLane<kLanes>(up_to_lane, kLanes - 1)));
      } else {
        WarpInclusiveScan<kLanes>(values, lane, op);  // across the lanes, one per k
        // Then in order along the row: each part after the combination of those before it.
#pragma unroll
        for (int k = 0; k < kScanItems; ++k) {
          const S total = FromLane<kLanes>(values[k], kLanes - 1);
          values[k] = op(carry, values[k]);
          carry = Settled<Op>(op(carry, total));
        }
      }
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        const int64_t j = element(tile, k);
        if (active && j < cols)
          out[ScanIndex(base, cols, j, reverse)] = M::Store(fn.Finish(Carry::Lower(values[k])));
      }
    }
  }
}
// [scan_warp.end]

// [scan_tiles.begin]
// The tiled path. Tile t of a row covers elements [t * tile, (t + 1) * tile) along the scan; block
// b takes tile b of the rows x tiles of the input. A thread holds kItems values: warp w loads the
// w-th 32 x kItems elements of the tile, lane-strided (coalesced): element k of lane l is at
// 32 k + l within the warp's part; past the row's end stands `padding` (the kernel puts the
// operator's identity there before scanning).
template <int kItems, typename T, typename Fn, typename... In>
__device__ __forceinline__ void LoadTile(const Fn& fn, int64_t base, int64_t cols, int64_t start,
                                         bool reverse, Compute<T> (&values)[kItems],
                                         Compute<T> padding, const In*... ins) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t first = start + int64_t{warp} * 32 * kItems + lane;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int64_t j = first + int64_t{k} * 32;
    values[k] = j < cols ? fn.Value(FloatMath<T>::Load(ins[ScanIndex(base, cols, j, reverse)])...)
                         : padding;
  }
}

// What a tile has published: nothing yet, its total, or its inclusive prefix (the combination
// of the row's tiles up to it), in the order a tile publishes them (ChainedPrefix::Wait waits for
// one or a later one).
enum TileStatus : unsigned { kTileEmpty = 0, kTileTotal = 1, kTileInclusive = 2 };

template <typename S>
struct TileState {
  unsigned status;
  S value;
};

// The tiles' states in the workspace, zeroed before the launch: status and value stored and
// loaded together by one access, which a reader sees whole or not at all. A 4-byte state (a
// float) is one 64-bit word; an 8-byte one (a double, a float product's) is 16 bytes, accessed as
// PTX's 128-bit type (single-copy atomic; sm_70 and later). (A status released after its value,
// in two accesses, made every look-back step two dependent loads: float64 (1, 2^24) took 138 us
// against 110 on an H100.) A larger state (a float64 product's) takes that way all the same:
// TileStates<S, 0>.
template <typename S, int kWordBytes = sizeof(S) == 4 ? 4 : (sizeof(S) == 8 ? 8 : 0)>
struct TileStates {
  static_assert(kWordBytes == 4, "a 4-byte state in one 64-bit word");
  unsigned long long* words;  // [tiles]

  static int64_t Bytes(int64_t tiles) { return tiles * 8; }
  explicit TileStates(void* workspace) : words(static_cast<unsigned long long*>(workspace)) {}

  __device__ void Publish(int64_t tile, unsigned status, S value) const {
    const unsigned long long word =
        (static_cast<unsigned long long>(status) << 32) | cuda::std::bit_cast<unsigned>(value);
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(words[tile])
        .store(word, cuda::memory_order_relaxed);
  }
  __device__ TileState<S> Load(int64_t tile) const {
    const unsigned long long word =
        cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(words[tile])
            .load(cuda::memory_order_relaxed);
    return {static_cast<unsigned>(word >> 32),
            cuda::std::bit_cast<S>(static_cast<unsigned>(word & 0xffffffffu))};
  }
};

template <typename S>
struct TileStates<S, 8> {
  unsigned long long* words;  // [2 * tiles]: status, value

  static int64_t Bytes(int64_t tiles) { return tiles * 16; }
  explicit TileStates(void* workspace) : words(static_cast<unsigned long long*>(workspace)) {}

  __device__ void Publish(int64_t tile, unsigned status, S value) const {
    const unsigned long long bits = cuda::std::bit_cast<unsigned long long>(value);
    asm volatile(
        "{\n\t.reg .b128 state;\n\tmov.b128 state, {%1, %2};\n\t"
        "st.relaxed.gpu.global.b128 [%0], state;\n\t}"
        :
        : "l"(words + 2 * tile), "l"(static_cast<unsigned long long>(status)), "l"(bits)
        : "memory");
  }
  __device__ TileState<S> Load(int64_t tile) const {
    unsigned long long status = 0, bits = 0;
    asm volatile(
        "{\n\t.reg .b128 state;\n\tld.relaxed.gpu.global.b128 state, [%2];\n\t"
        "mov.b128 {%0, %1}, state;\n\t}"
        : "=l"(status), "=l"(bits)
        : "l"(words + 2 * tile)
        : "memory");
    return {static_cast<unsigned>(status), cuda::std::bit_cast<S>(bits)};
  }
};

// Any other state: a slot for the total and one for the inclusive prefix, each written before
// the status that announces it is released, and never written again (so a reader that has
// acquired a status reads its slot whole).
template <typename S>
struct TileStates<S, 0> {
  struct Record {
    unsigned status;
    S total;
    S inclusive;
  };
  Record* records;  // [tiles]

  static int64_t Bytes(int64_t tiles) { return tiles * static_cast<int64_t>(sizeof(Record)); }
  explicit TileStates(void* workspace) : records(static_cast<Record*>(workspace)) {}

  __device__ void Publish(int64_t tile, unsigned status, S value) const {
    Record& record = records[tile];
    (status == kTileInclusive ? record.inclusive : record.total) = value;
    cuda::atomic_ref<unsigned, cuda::thread_scope_device>(record.status)
        .store(status, cuda::memory_order_release);
  }
  __device__ TileState<S> Load(int64_t tile) const {
    Record& record = records[tile];
    const unsigned status = cuda::atomic_ref<unsigned, cuda::thread_scope_device>(record.status)
                                .load(cuda::memory_order_acquire);
    if (status == kTileEmpty) return {status, S{}};
    return {status, status == kTileInclusive ? record.inclusive : record.total};
  }
};

// The block prefix callback of the tiled path, run by the block's first warp (lane 0's result
// counts). A row's tiles form windows of 32, the first starting at the row's first tile. Every
// tile publishes its total; the last tile of a window (its boundary) publishes, after its
// look-back, the row's combination up to it, P, which the windows alone define:
//   P(before the row) = the identity,
//   P(window j's boundary) = Settle(P(window j - 1's boundary) op W_j[31]),
// where W_j[l] is the warp's inclusive scan of window j's totals at lane l (WarpInclusiveScan: a
// grouping fixed by the lane). The tile at lane l of window j has before it P(window j - 1's
// boundary) op W_j[l - 1]. The look-back reads the totals of the tile's own window before it,
// then goes back a window at a time, each window's tiles a lane each, to the nearest boundary
// that has published P, keeping each window's W[31] on the way; then combines forward, a window
// at a time. Whichever boundary it reached, the combination is the same: the bits depend on the
// input alone. (cub::DeviceScan's look-back combines what it finds as a tree whose shape
// depends on the timing; one combined from the left, a tile at a time, made a long row's
// look-back a chain of as many combinations as tiles it reached: one row of 2^24 float32
// products took 131 us that way.)
template <typename S, typename Op>
struct ChainedPrefix {
  TileStates<S> states;
  int64_t id;         // the tile, in rows x tiles
  int64_t row_first;  // the id of the row's first tile
  S* kept;            // kScanLookBackWindows windows' W[31], in shared memory

  // The tile's state once it has published at least `status` (every earlier tile is held by a
  // block running).
  __device__ TileState<S> Wait(int64_t tile, TileStatus status = kTileTotal) const {
    TileState<S> state;
    do {
      state = states.Load(tile);
    } while (state.status < status);
    return state;
  }

  __device__ S operator()(S total) const {
    const Op op{};
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int at = static_cast<int>((id - row_first) % 32);  // the tile's lane in its window
    const int64_t start = id - at;                           // its window's first tile
    if (lane == 0) states.Publish(id, kTileTotal, total);
    // The tile's window up to it: the totals before it (tiles that are no boundary: totals only).
    S mine = Op::Identity();
    if (lane < at) mine = Wait(start + lane).value;
    if (lane == at) mine = total;
    const S window = WarpInclusiveScan<32>(mine, lane, op);  // lanes past `at`: identities
    // P at the boundary before the window: back a window at a time.
    S before = Op::Identity();
    int windows = 0;
    for (int64_t first = start - 32; first >= row_first; first -= 32) {
      const TileState<S> seen = Wait(first + lane);
      if (__shfl_sync(0xffffffffu, seen.status == kTileInclusive ? 1 : 0, 31)) {
        before = FromLane<32>(seen.value, 31);
        break;
      }
      if (windows == kScanLookBackWindows) {  // no room kept: wait for this window's P
        before = Wait(first + 31, kTileInclusive).value;
        break;
      }
      const S total_of_window = FromLane<32>(WarpInclusiveScan<32>(seen.value, lane, op), 31);
      if (lane == 0) kept[windows] = total_of_window;
      ++windows;
    }
    __syncwarp();  // kept, written by lane 0, read by all
    for (int w = windows - 1; w >= 0; --w) before = Settled<Op>(op(before, kept[w]));
    if (at == 31) {  // the window's boundary (every lane shuffles)
      const S inclusive = Settled<Op>(op(before, FromLane<32>(window, 31)));
      if (lane == 0) states.Publish(id, kTileInclusive, inclusive);
    }
    const S in_window = FromLane<32>(window, at == 0 ? 0 : at - 1);  // every lane shuffles
    return at == 0 ? before : op(before, in_window);
  }
};

// A block per tile, the tile of its own index: blocks start in index order, so every tile a
// look-back waits for is held by a block already running (cub::DeviceScan relies on the same).
template <typename T, typename Op, typename Fn, typename... In>
__global__ void __launch_bounds__(
    kScanTileThreads, kScanTileBlocksPerSmOf<Compute<T>, typename ScanCarry<Op, Compute<T>>::State>)
    TileScanKernel(Fn fn, int64_t cols, int64_t tiles, bool reverse,
                   TileStates<typename ScanCarry<Op, Compute<T>>::State> states,
                   T* __restrict__ out, const In*... ins) {
  AwaitPriorKernels();
  using M = FloatMath<T>;
  using C = Compute<T>;
  using Carry = ScanCarry<Op, C>;
  using S = typename Carry::State;
  constexpr int kItems = kScanTileItems<C>;
  using Exchange = cub::BlockExchange<C, kScanTileThreads, kItems>;
  using Scan = cub::BlockScan<S, kScanTileThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ union {
    typename Exchange::TempStorage exchange;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ S kept[kScanLookBackWindows];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t id = blockIdx.x;
  const int64_t row = id / tiles;
  const int64_t tile = id - row * tiles;
  const int64_t start = tile * kScanTile<C>;
  const int64_t base = row * cols;
  C values[kItems];
  LoadTile<kItems, T>(fn, base, cols, start, reverse, values, C(0), ins...);
  // Lane-strided within each warp's part to consecutive per thread (what BlockScan scans).
  Exchange(temp.exchange).WarpStripedToBlocked(values, values);
  __syncthreads();  // temp.exchange's last reads before temp.scan's writes
  S scanned[kItems];
  const int64_t blocked = start + int64_t{threadIdx.x} * kItems;  // this thread's first, now
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    scanned[k] = blocked + k < cols ? Carry::Lift(values[k]) : Op::Identity();
  }
  ChainedPrefix<S, Op> prefix{states, id, id - tile, kept};
  Scan(temp.scan).InclusiveScan(scanned, scanned, Op{}, prefix);
#pragma unroll
  for (int k = 0; k < kItems; ++k) values[k] = Carry::Lower(scanned[k]);
  __syncthreads();  // temp.scan's last reads before temp.exchange's writes
  Exchange(temp.exchange).BlockedToWarpStriped(values, values);
  const int64_t first = start + int64_t{warp} * 32 * kItems + lane;
#pragma unroll
  for (int k = 0; k < kItems; ++k) {
    const int64_t j = first + int64_t{k} * 32;
    if (j < cols) out[ScanIndex(base, cols, j, reverse)] = M::Store(fn.Finish(values[k]));
  }
}
// [scan_tiles.end]

// [scan_launch.begin]
template <typename T, typename Fn, typename... In>
void LaunchScan(const Fn& fn, int64_t rows, int64_t cols, bool reverse, cudaStream_t stream, T* out,
                const In*... ins) {
  static_assert((std::is_same_v<In, T> && ...),
                "LaunchScan: every input has the output's storage type");
  using C = Compute<T>;
  using Op = typename ScanOpOf<Fn, C>::type;
  using S = typename ScanCarry<Op, C>::State;
  if (rows == 0 || cols == 0) return;
  if (cols < kScanBlockMinCols) {  // short rows: a group of lanes per row
    const auto launch = [&](auto lanes) {
      constexpr int kLanes = decltype(lanes)::value;
      Launch(ScanWarpRowsKernel<kLanes, T, Op, Fn, In...>, GridSize(rows, kScanThreads / kLanes),
             kScanThreads, stream, fn, rows, cols, reverse, out, ins...);
    };
    if (cols <= 4 * kScanItems) {
      launch(std::integral_constant<int, 4>{});
    } else if (cols <= 8 * kScanItems) {
      launch(std::integral_constant<int, 8>{});
    } else if (cols <= 16 * kScanItems) {
      launch(std::integral_constant<int, 16>{});
    } else {
      launch(std::integral_constant<int, 32>{});
    }
    return;
  }
  int device = 0;
  int sms = 0;
  TVM_FFI_CHECK_CUDA_ERROR(cudaGetDevice(&device));
  TVM_FFI_CHECK_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t tiles = cuda::ceil_div(cols, kScanTile<C>);
  if (rows >= kScanFewRowsPerSm * sms || tiles < 2 || rows * tiles > kMaxGridX ||
      !HasFrameworkAllocator()) {
    Launch(ScanRowsKernel<T, Op, Fn, In...>, GridSize(rows, 1), kScanThreads, stream, fn, rows,
           cols, reverse, out, ins...);
    return;
  }
  // Few long rows: a block per tile, the tiles' states in the framework's memory.
  const int64_t bytes = TileStates<S>::Bytes(rows * tiles);
  ffi::Tensor workspace = AllocFromFramework(ffi::Shape({cuda::ceil_div(bytes, int64_t{8})}),
                                             kInt64, DLDevice{kDLCUDA, device});
  TVM_FFI_ICHECK_EQ(reinterpret_cast<uintptr_t>(workspace.data_ptr()) % 16, 0)
      << "the framework's allocator returned memory less aligned than 16 bytes";
  TVM_FFI_CHECK_CUDA_ERROR(cudaMemsetAsync(workspace.data_ptr(), 0, bytes, stream));
  Launch(TileScanKernel<T, Op, Fn, In...>, static_cast<unsigned int>(rows * tiles),
         kScanTileThreads, stream, fn, cols, tiles, reverse, TileStates<S>(workspace.data_ptr()),
         out, ins...);
  // The workspace goes back to the framework's allocator here; its stream-ordered reuse comes
  // after this launch on the same stream.
}
// [scan_launch.end]

}  // namespace gpu
}  // namespace scale_lib

#endif  // SCALE_LIB_KERNELS_SCAN_CUH_
