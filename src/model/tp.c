/* model/tp.c: tensor parallelism (docs/tensor-parallel.md). The Megatron split as a
 * transformation of a bound model: every rank describes and binds the checkpoint
 * whole (pointers into the one mapping, nothing read), then its plan and bindings
 * are cut to its shard: q/k/v and gate/up keep a run of rows (column-parallel: a
 * pointer offset), o_proj and down_proj a run of columns of every row (row-parallel:
 * a column slice, made dense by the backend's upload or, on the CPU, here), the
 * embedding and the head a run of vocabulary rows. Families are not touched. Each
 * rank has its own backend; the forward all-reduces each row-parallel product and
 * the embedding, and gathers the logits. The process's ranks run as threads: the
 * caller's thread is the first rank, one thread per further rank. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/tp_group.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/settings.h"
#include "model/model.h"

typedef struct tp_state tp_state;
typedef void (*tp_job)(tp_state *t, int r, void *arg);

struct tp_state {
    int local;                     /* ranks in this process */
    model *rank[TP_MAX_RANKS];     /* [local]; [0] is the model the engine holds */
    tp_host_group *hg;             /* CPU ranks: their host group */
    pthread_t th[TP_MAX_RANKS];
    int started;                   /* threads running: ranks 1..started */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    long gen;                      /* job counter: a rank thread runs each new one once */
    int stop, n_done;
    tp_job job;
    void *arg;
    int rc[TP_MAX_RANKS];
    char msg[TP_MAX_RANKS][256];   /* err_msg of a failed rank (the message is per thread) */
};

/* ---- the shard of one rank -------------------------------------------------------- */

/* Bytes of one stored row of w's arrays (its code, scale and bias rows). */
static void row_bytes(const weight *w, int64_t cols, size_t *code, size_t *scale, size_t *bias) {
    weight one = *w;
    one.rows = 1;
    one.cols = cols;
    weight_sizes(&one, code, scale, bias);
}

/* Rows [r0, r0 + n) of w: a pointer offset into the mapping. */
static void slice_rows(weight *w, int64_t r0, int64_t n) {
    size_t code, scale, bias;
    row_bytes(w, w->src_cols ? w->src_cols : w->cols, &code, &scale, &bias);
    w->data = (const char *)w->data + (size_t)r0 * code;
    if (w->scales) w->scales = (const char *)w->scales + (size_t)r0 * scale;
    if (w->biases) w->biases = (const char *)w->biases + (size_t)r0 * bias;
    w->rows = n;
    row_bytes(w, w->cols, &code, &scale, &bias);
    w->nbytes = (size_t)n * (code + (w->scales ? scale : 0) + (w->biases ? bias : 0));
}

/* Columns [c0, c0 + n) of every row of w: the arrays point at column c0 and the
 * stored width stays in src_cols. Quantized: whole groups only. */
static int slice_cols(weight *w, int64_t c0, int64_t n, const char *what, int l, int tp) {
    const int64_t g = w->fmt == WF_AFFINE ? w->group : w->fmt == WF_MXFP4 ? 32 : 1;
    if (c0 % g || n % g || (w->fmt == WF_AFFINE && (c0 * w->bits) % 32))
        return err_set("--tp %d: layer %d %s: the column slice [%lld, %lld) of each rank is not a whole number of the "
                       "checkpoint's quantization groups of %lld (choose a --tp that splits it into whole groups)",
                       tp, l, what, (long long)c0, (long long)(c0 + n), (long long)g);
    size_t code, scale, bias;
    row_bytes(w, c0, &code, &scale, &bias); /* bytes of the first c0 columns of a row */
    if (!w->src_cols) w->src_cols = w->cols;
    w->data = (const char *)w->data + code;
    if (w->scales) w->scales = (const char *)w->scales + scale;
    if (w->biases) w->biases = (const char *)w->biases + bias;
    w->cols = n;
    row_bytes(w, n, &code, &scale, &bias);
    w->nbytes = (size_t)w->rows * (code + (w->scales ? scale : 0) + (w->biases ? bias : 0));
    return 0;
}

/* v [n0 + n ...] -> its elements [n0, n0 + n), in place. */
static void slice_vec(float *v, int64_t n0, int64_t n) {
    if (v && n0) memmove(v, v + n0, (size_t)n * sizeof *v);
}

/* What a layer's heads come to at `tp` ranks; -1 naming --tp when they do not split. */
static int head_split(const layer_plan *p, int l, int tp, int *nh, int *nkv) {
    if (p->n_heads % tp)
        return err_set("--tp %d: layer %d has %d attention heads, which %d ranks do not divide", tp, l, p->n_heads, tp);
    *nh = p->n_heads / tp;
    if (p->n_kv % tp == 0) *nkv = p->n_kv / tp;
    else if (tp % p->n_kv == 0) *nkv = 1; /* fewer KV heads than ranks: each rank keeps the one its q heads read */
    else return err_set("--tp %d: layer %d has %d KV heads: %d ranks neither divide them nor are a multiple of them", tp, l,
                        p->n_kv, tp);
    return 0;
}

/* Checks that every layer of m splits over tp ranks (before anything is built). */
static int tp_check(const model *m, int tp) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        int nh, nkv;
        if (p->qk_norm != QK_NORM_WHOLE && head_split(p, l, tp, &nh, &nkv) != 0) return -1;
        if (p->inter % tp)
            return err_set("--tp %d: layer %d's MLP width %d does not split into %d ranks", tp, l, p->inter, tp);
    }
    const int vw = (m->cfg.vocab + tp - 1) / tp;
    if ((long)vw * (tp - 1) >= m->cfg.vocab)
        return err_set("--tp %d: the vocabulary of %d tokens leaves rank %d no rows", tp, m->cfg.vocab, tp - 1);
    return 0;
}

/* Cuts m (bound whole) to rank r of tp: its plan widths and its bindings. */
static int tp_shard(model *m, int r, int tp) {
    m->tp = tp;
    m->tp_rank = r;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        layer_plan *p = &m->plan[l];
        layer_weights *w = &m->lw[l];
        const int64_t hd = p->head_dim;
        /* OLMo 2 normalizes q and k over all heads at once: its attention is not split
         * (each rank computes all of it, nothing to reduce) */
        if (p->qk_norm != QK_NORM_WHOLE) {
            int nh, nkv;
            if (head_split(p, l, tp, &nh, &nkv) != 0) return -1;
            const int64_t q0 = (int64_t)r * nh, kv0 = p->n_kv % tp == 0 ? (int64_t)r * nkv : q0 / (p->n_heads / p->n_kv);
            if (w->wq.data) slice_rows(&w->wq, q0 * hd, nh * hd);
            if (w->wk.data) slice_rows(&w->wk, kv0 * hd, nkv * hd);
            if (w->wv.data) slice_rows(&w->wv, kv0 * hd, nkv * hd);
            if (w->wo.data && slice_cols(&w->wo, q0 * hd, nh * hd, "self_attn.o_proj", l, tp) != 0) return -1;
            slice_vec(w->bq, q0 * hd, nh * hd);
            slice_vec(w->bk, kv0 * hd, nkv * hd);
            slice_vec(w->bv, kv0 * hd, nkv * hd);
            slice_vec(w->sinks, q0, nh);
            p->n_heads = nh;
            p->n_kv = nkv;
            p->tp_attn = 1;
        }
        if (p->inter > 0) {
            const int64_t I = p->inter / tp, i0 = (int64_t)r * I;
            slice_rows(&w->gate, i0, I);
            slice_rows(&w->up, i0, I);
            if (slice_cols(&w->down, i0, I, "mlp.down_proj", l, tp) != 0) return -1;
            p->inter = (int)I;
            p->tp_mlp = 1;
        }
        /* experts and Gemma 4's per-layer inputs stay whole on every rank (computed the
         * same everywhere, nothing to reduce): docs/tensor-parallel.md */
    }
    const int V = m->cfg.vocab;
    m->vocab_w = (V + tp - 1) / tp;
    m->vocab_lo = r * m->vocab_w;
    const int n = V - m->vocab_lo < m->vocab_w ? V - m->vocab_lo : m->vocab_w;
    slice_rows(&m->embed, m->vocab_lo, n);
    if (m->cfg.tie) m->lm_head = m->embed;
    else slice_rows(&m->lm_head, m->vocab_lo, n);
    return 0;
}

/* A column slice made dense in host memory (the CPU's kernels read dense rows): a
 * pitched copy of only this rank's columns, straight from the mapping. */
static int densify(model *m, weight *w) {
    if (!w->src_cols) return 0;
    size_t code, scale, bias, scode, sscale, sbias;
    row_bytes(w, w->cols, &code, &scale, &bias);
    row_bytes(w, w->src_cols, &scode, &sscale, &sbias);
    void **own = realloc(m->tp_owned, (size_t)(m->n_tp_owned + 3) * sizeof *own);
    if (!own) return err_set("out of memory");
    m->tp_owned = own;
    const void *src[3] = {w->data, w->scales, w->biases};
    const size_t dst_row[3] = {code, scale, bias}, src_row[3] = {scode, sscale, sbias};
    const void **field[3] = {&w->data, &w->scales, &w->biases};
    for (int a = 0; a < 3; a++) {
        if (!src[a]) continue;
        char *d = mem_aligned((size_t)w->rows * dst_row[a], "weight shard");
        if (!d) return -1;
        for (int64_t i = 0; i < w->rows; i++)
            memcpy(d + (size_t)i * dst_row[a], (const char *)src[a] + (size_t)i * src_row[a], dst_row[a]);
        m->tp_owned[m->n_tp_owned++] = d;
        *field[a] = d;
    }
    w->src_cols = 0;
    return 0;
}

static int densify_all(model *m) {
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (densify(m, &m->lw[l].wo) || densify(m, &m->lw[l].down)) return -1;
    return 0;
}

/* ---- the rank threads ----------------------------------------------------------------- */

static void run_rank(tp_state *t, int r) {
    err_clear();
    t->job(t, r, t->arg);
    if (t->rc[r] != 0) snprintf(t->msg[r], sizeof t->msg[r], "%s", err_msg());
}

typedef struct {
    tp_state *t;
    int r;
} rank_arg;

static void *rank_main(void *p) {
    rank_arg a = *(rank_arg *)p;
    free(p);
    tp_state *t = a.t;
    long seen = 0;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->stop && t->gen == seen) pthread_cond_wait(&t->go, &t->mu);
        if (t->stop) break;
        seen = t->gen;
        pthread_mutex_unlock(&t->mu);
        run_rank(t, a.r);
        pthread_mutex_lock(&t->mu);
        if (++t->n_done == t->local - 1) pthread_cond_signal(&t->done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Runs job on every local rank at once (the first on this thread); the first failed
 * rank's message, -1, when any fails. */
static int run_all(tp_state *t, tp_job job, void *arg) {
    memset(t->rc, 0, sizeof t->rc);
    t->job = job;
    t->arg = arg;
    if (t->local > 1) {
        pthread_mutex_lock(&t->mu);
        t->n_done = 0;
        t->gen++;
        pthread_cond_broadcast(&t->go);
        pthread_mutex_unlock(&t->mu);
    }
    run_rank(t, 0);
    if (t->local > 1) {
        pthread_mutex_lock(&t->mu);
        while (t->n_done < t->local - 1) pthread_cond_wait(&t->done, &t->mu);
        pthread_mutex_unlock(&t->mu);
    }
    for (int r = 0; r < t->local; r++)
        if (t->rc[r] != 0) return err_set("%s", r == 0 ? t->msg[0] : t->msg[r]);
    return 0;
}

/* ---- opening ------------------------------------------------------------------------ */

typedef struct {
    int world, offset;
    unsigned char id[TP_ID_BYTES];
} join_arg;

static void join_job(tp_state *t, int r, void *p) {
    join_arg *a = p;
    model *m = t->rank[r];
    void *shared = m->be->ops->tp_unique_id ? (void *)a->id : (void *)t->hg;
    if (!m->be->ops->tp_join) t->rc[r] = err_set("--tp: the %s backend has no collectives", m->be->ops->name);
    else if ((t->rc[r] = m->be->ops->tp_join(m->be, a->offset + r, a->world, shared)) != 0) err_prefix("--tp: rank %d", a->offset + r);
}

/* The NCCL unique id of a group over several hosts: made by the process holding rank 0
 * and fetched by the others from --tp-master (model/tp_net.c). */
int tp_net_share_id(const char *master, int is_root, int world, int local, unsigned char *id);

int model_tp_open(model *m, int tp, int n_threads, const char *device) {
    const long world_set = setting_int(SET_CELER_TP_WORLD), offset = setting_int(SET_CELER_TP_RANK_OFFSET);
    const int world = world_set > 0 ? (int)world_set : tp;
    if (world > TP_MAX_RANKS || world < tp)
        return err_set("--tp-world %d: want --tp (%d) to %d ranks", world, tp, TP_MAX_RANKS);
    if (offset < 0 || offset + tp > world)
        return err_set("--tp-rank-offset %ld: ranks %ld..%ld are past the group of %d (--tp-world)", offset, offset,
                       offset + tp - 1, world);
    if (tp_check(m, world) != 0) return -1;
    tp_state *t = mem_calloc(1, sizeof *t, "tensor parallelism");
    if (!t) return -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    m->tps = t;
    m->tp_local = tp;
    t->local = tp;
    t->rank[0] = m;
    for (int r = 1; r < tp; r++) {
        model *mr = mem_calloc(1, sizeof *mr, "model rank");
        if (!mr) return -1;
        t->rank[r] = mr;
        mr->ck = m->ck;
        mr->ck_borrowed = 1;
        if (model_load(mr) != 0) return -1;
    }
    /* threads per rank: the cores shared out (each rank's CPU backend has its own pool) */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int total = n_threads > 0 ? n_threads : cores > 0 ? (int)cores : 1, per = total / tp > 0 ? total / tp : 1;
    for (int r = 0; r < tp; r++) {
        model *mr = t->rank[r];
        if (tp_shard(mr, (int)offset + r, world) != 0) return -1;
        char dev[32];
        const char *d = device;
        if (r > 0) {
            const backend *b0 = m->be;
            if (b0->device_id >= 0) snprintf(dev, sizeof dev, "cuda:%d", b0->device_id + r);
            else snprintf(dev, sizeof dev, "cpu");
            d = dev;
        }
        if (!(mr->be = backend_open(d, per, model_max_cols(mr)))) {
            if (r > 0 && m->be->device_id >= 0)
                return err_prefix("--tp %d: rank %d needs GPU %d (more ranks than GPUs?)", tp, r, m->be->device_id + r);
            return err_prefix("--tp %d: rank %d", tp, r);
        }
        if (!mr->be->ops->on_device && densify_all(mr) != 0) return err_prefix("--tp %d: rank %d", tp, r);
        if (model_precision_init(mr) != 0 || model_upload(mr) != 0) return err_prefix("--tp %d: rank %d", tp, r);
    }
    /* the rank threads, then every rank joins the group at once */
    for (int r = 1; r < tp; r++) {
        rank_arg *a = malloc(sizeof *a);
        if (!a) return err_set("out of memory");
        a->t = t;
        a->r = r;
        if (pthread_create(&t->th[r], NULL, rank_main, a) != 0) {
            free(a);
            return err_set("--tp %d: cannot start the thread of rank %d", tp, r);
        }
        t->started = r;
    }
    join_arg ja = {world, (int)offset, {0}};
    if (m->be->ops->tp_unique_id) {
        const char *master = setting_str(SET_CELER_TP_MASTER);
        if (world > tp && !(master && *master))
            return err_set("--tp-world %d spans several hosts: give --tp-master ADDR:PORT", world);
        if (offset == 0 && m->be->ops->tp_unique_id(m->be, ja.id) != 0) return err_prefix("--tp %d", tp);
        if (world > tp && tp_net_share_id(master, offset == 0, world, tp, ja.id) != 0) return err_prefix("--tp-master");
    } else {
        if (world > tp) return err_set("--tp-world %d: the CPU ranks of one process cannot span hosts", world);
        if (!(t->hg = tp_host_group_new(tp))) return -1;
    }
    return run_all(t, join_job, &ja);
}

void model_tp_close(model *m) {
    tp_state *t = m->tps;
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int r = 1; r <= t->started; r++) pthread_join(t->th[r], NULL);
    for (int r = 1; r < t->local; r++) {
        if (t->rank[r] && t->rank[r]->be && t->rank[r]->be->ops->use_here) t->rank[r]->be->ops->use_here(t->rank[r]->be);
        model_free(t->rank[r]);
    }
    if (m->be && m->be->ops->use_here) m->be->ops->use_here(m->be);
    tp_host_group_free(t->hg);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    pthread_mutex_destroy(&t->mu);
    free(t);
    m->tps = NULL;
}

/* ---- the engine's view ------------------------------------------------------------ */

int model_n_caches(const model *m) { return m->cfg.n_layers * (m->tps ? m->tps->local : 1); }

const model *model_cache_owner(const model *m, int i, int *layer) {
    const int L = m->cfg.n_layers;
    *layer = i % L;
    return m->tps ? m->tps->rank[i / L] : m;
}

typedef struct {
    fwd_seq *seqs;   /* [local][n_seqs]: each rank's view of the sequences */
    int n_seqs, all;
    model_scratch *s;
    const int32_t *tok;
} fwd_arg;

static void forward_job(tp_state *t, int r, void *p) {
    fwd_arg *a = p;
    backend *b = t->rank[r]->be;
    if (b->ops->use_here) b->ops->use_here(b); /* the caller's thread may not be the one that opened it */
    t->rc[r] = model_forward_rank(t->rank[r], a->seqs + (size_t)r * (size_t)a->n_seqs, a->n_seqs, a->s->peer[r], a->tok,
                                  a->all);
}

int model_tp_forward(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, const int32_t *tok, int all) {
    tp_state *t = m->tps;
    const int L = m->cfg.n_layers;
    /* made here, before any rank starts: a rank that failed before its first
     * collective would leave the others waiting in it */
    fwd_seq *rs = mem_alloc((size_t)t->local * (size_t)(n_seqs > 0 ? n_seqs : 1) * sizeof *rs, "forward");
    if (!rs) return -1;
    for (int r = 0; r < t->local; r++)
        for (int i = 0; i < n_seqs; i++) {
            rs[(size_t)r * n_seqs + i] = seqs[i];
            rs[(size_t)r * n_seqs + i].caches = seqs[i].caches + (size_t)r * (size_t)L; /* this rank's caches */
        }
    fwd_arg a = {rs, n_seqs, all, s, tok};
    int rc = run_all(t, forward_job, &a);
    free(rs);
    return rc;
}

model_scratch *model_tp_scratch(const model *m, int max_T, model_scratch *(*one)(const model *, int)) {
    tp_state *t = m->tps;
    model_scratch *s0 = one(m, max_T);
    if (!s0) return NULL;
    if (!(s0->peer = mem_calloc((size_t)t->local, sizeof *s0->peer, "scratch"))) {
        model_scratch_free(s0);
        return NULL;
    }
    s0->peer[0] = s0;
    s0->n_peer = t->local;
    for (int r = 1; r < t->local; r++)
        if (!(s0->peer[r] = one(t->rank[r], max_T))) {
            model_scratch_free(s0);
            return NULL;
        }
    return s0;
}
