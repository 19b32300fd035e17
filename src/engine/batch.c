/* engine/batch.c: one step over several sessions (continuous batching). Today each
 * session runs its own forward in turn; the contract (all advance or none) is what the
 * server builds on while the shared-matmul forward is written (docs/engine-core.md). */
#include "base/err.h"
#include "celer.h"

int celer_batch_eval(celer_session *const *sessions, const int32_t *const *tokens, const int *n_tokens, int n) {
    for (int i = 0; i < n; i++) {
        if (celer_session_eval(sessions[i], tokens[i], n_tokens[i], NULL, 0) != 0) {
            err_prefix("batch: session %d of %d", i, n);
            for (int k = 0; k < i; k++) celer_session_rewind(sessions[k], celer_session_pos(sessions[k]) - n_tokens[k]);
            return -1;
        }
    }
    return 0;
}
