/* fuzz/fuzz_safetensors.c: arbitrary bytes as a .safetensors file: st_open must
 * accept it with every tensor inside the file or refuse it with a message. */
#include "fuzz_util.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fz_file("x.safetensors", data, n);
    st_file *f = st_open(p);
    if (f) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < f->n; i++) {
            const st_tensor *t = &f->t[i];
            if (st_find(f, t->name) == NULL) abort();
            if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
        }
        (void)sink;
    }
    st_close(f);
    return 0;
}
