/* fuzz/fuzz_server_request.c: the server's request parsing without a socket or a
 * model (fuzz/replay_server_request.h says what one input does). */
#include "fuzz_util.h"
#include "replay_server_request.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (replay_server_init() != 0) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (replay_server_request(data, n) != 0) abort();
    return 0;
}
