/* Which devices this build of the library computes on (skiplm_base.h): the CPU always, CUDA
 * only when it was compiled with the CUDA backend (make cuda, -DSKIPLM_CUDA). Callers that take
 * a device name from a user (the Python package's Model.load) ask here first, so that a CPU-only
 * library refuses "cuda" with a message instead of running on the CPU in its place. */
#include "skiplm_base.h"
#include <string.h>

int sk_device_check(const char *device) {
    if (!device || !strcmp(device, "cpu")) return SK_OK;
    if (!strcmp(device, "cuda")) {
#ifdef SKIPLM_CUDA
        return SK_OK;
#else
        return sk_error(SK_EINVAL, "device 'cuda': this library was built without CUDA (libskiplm.so is the CPU build; "
                                   "`make cuda` builds the CUDA backend into build-cuda/skiplm, docs/cuda.md)");
#endif
    }
    return sk_error(SK_EINVAL, "unknown device '%s' (cpu or cuda)", device);
}
