// Device memory for partial sums that a kernel adds into and the call's finishing pass reads,
// kept so that a call needs no memset before its kernel: two halves per stream, used by
// alternate calls. A call's kernel adds into the half that holds zeros; its finishing pass sets
// the other half (the call before's sums, read by that call's own finishing pass) back to zeros
// before it waits for the kernel, so that those stores are not on the call's critical path.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace flexkit::backend::cuda {

struct AlternatingWorkspace {
  unsigned long long* sums;   // at least the words asked for, all zeros
  unsigned long long* stale;  // the other half: its first stale_words are to be set to zeros
  std::size_t stale_words;    // even (16-byte stores), within the half
};

// The halves for the next call on `stream` of `device` that adds into `words` int64 sums,
// grown as asked. The call must queue, in stream order, a kernel that adds into `sums` and then
// a finishing pass that reads them and sets `stale`'s first stale_words to zeros without reading
// them; the next call on the stream gets the halves swapped.
AlternatingWorkspace alternating_workspace(int device, cudaStream_t stream, std::size_t words);

}  // namespace flexkit::backend::cuda
