/* fuzz/fuzz_server_request.c: the server's request parsing without a socket or a
 * model (fuzz/replay_server_request.h says what one input does). */
#include "fuzz_util.h"
#include "replay_server_request.h"
#include "base/settings.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (replay_server_init() != 0) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    /* Wire-mode inputs (a live server over a socket) only with CELER_FUZZ_WIRE=1, which
     * CI's run sets (.ci/run); tests/test_fuzz_regress.c replays the wire seeds always.
     * The "stall" they once showed was libFuzzer's alarm cutting the harness's poll
     * short (docs/limits.md). */
    static int wire = -1;
    if (wire < 0) wire = setting_flag(SET_CELER_FUZZ_WIRE);
    if (n > 0 && (data[0] & 0x80) && !wire) return 0;
    if (replay_server_request(data, n) != 0) abort();
    return 0;
}
