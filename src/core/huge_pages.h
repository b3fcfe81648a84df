#pragma once
// Huge pages for memory the engine keeps (arenas, large buffers), made by a background thread at
// idle priority instead of on a run's path.
//
// Fresh memory is slow to touch, most of all on a virtual machine whose balloon hands freed memory
// back to the host (Firecracker, most clouds): measured on a 2-vCPU Xeon guest, 800 MB took 0.35 s
// to fault in as 4 KiB pages and 0.9-2.2 s as 2 MiB huge pages, every time, since the balloon
// reports freed blocks of huge-page size. Touched again within the process, the huge pages took
// 0.1 s, and a run on them is faster (llama at 1 thread: 1.52 s a step against 1.61 on small
// pages, whose boundaries stop the prefetchers). So memory is first touched in small pages, and
// turned into huge pages afterwards (MADV_COLLAPSE, which copies what the pages hold, so that a run
// may go on using the memory meanwhile).
//
// That runs only where the engine's threads leave a core free (set_spare_core, which the thread
// pool calls as it is sized). Without one, a background thread holding pages that a run's threads
// wait for stalled them all at their barriers (llama at 2 threads on 2 cores: 1.24-1.41 s a step
// against 0.93-0.98), so there memory is only advised (MADV_HUGEPAGE), for its first touch to
// fault in huge pages directly; the same where the kernel lacks MADV_COLLAPSE (before Linux 6.1).
#include <cstddef>
#include <cstdint>

namespace onnxtrain {

void set_spare_core(bool spare);
bool has_spare_core();

void collapse_to_huge_pages_later(uint8_t* begin, size_t bytes);
// Drops the queued collapse of the range and waits for one inside it to end: call before
// unmapping it. Cheap when nothing is queued.
void forget_huge_page_collapse(uint8_t* begin, size_t bytes);
// For tests: waits until nothing is queued; returns the bytes collapsed so far in this process.
size_t wait_for_huge_page_collapses();

}  // namespace onnxtrain
