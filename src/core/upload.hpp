// Moving a host array to a CUDA device without waiting for the device (the loader's batches).
#pragma once
#include "flexkit/array.hpp"

namespace flexkit::detail {

// `host` (a cpu array) on `device`: itself (contiguous) on the cpu. On CUDA a copy, queued on the
// current stream behind the work before it, staged through pinned memory, so that the host does not
// wait for that work as copy_to does; the copy is complete for whatever runs after it in that
// stream. Arrays too large to stage, flex16 arrays and other sources or targets go through copy_to.
Array upload_without_waiting(const Array& host, Device device);

}  // namespace flexkit::detail
