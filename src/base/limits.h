/* base/limits.h: every resource limit celer applies to what strangers hand it
 * (checkpoint files, tokenizer and template files, prompt-cache files, HTTP
 * requests), in one place with its default. docs/limits.md has the table, what each
 * error says and the test that hits it. The server's limits are defaults of
 * `celer serve` flags (src/cli/cmd_serve.c); the file limits are fixed at build time
 * (-DCELER_MAX_...=N overrides one). A limit is a refusal with one message naming
 * the file or parameter and the limit, never a crash. */
#ifndef CELER_LIMITS_H
#define CELER_LIMITS_H

/* ---- safetensors (src/io/safetensors.c) ---- */
#ifndef CELER_MAX_ST_HEADER
#define CELER_MAX_ST_HEADER (256u << 20)     /* bytes of JSON header per file */
#endif
#ifndef CELER_MAX_ST_TENSORS
#define CELER_MAX_ST_TENSORS 131072          /* tensors per file */
#endif
#define CELER_MAX_ST_DIMS 8                  /* dimensions per tensor */

/* ---- tokenizer.json, tokenizer_config.json (src/tokenizer/) ---- */
#ifndef CELER_MAX_JSON_DEPTH
#define CELER_MAX_JSON_DEPTH 512             /* nesting of arrays and objects */
#endif
#ifndef CELER_MAX_TOKEN_BYTES
#define CELER_MAX_TOKEN_BYTES 65536          /* bytes of one vocabulary or added token */
#endif
#ifndef CELER_MAX_MERGE_BYTES
#define CELER_MAX_MERGE_BYTES 1024           /* bytes of one BPE merge (both halves) */
#endif
/* Encoding (src/tokenizer/normalize.c, util.c): a tokenizer.json can describe work
 * that grows without bound in its input; these make such an encode fail instead. */
#ifndef CELER_MAX_NORM_GROWTH
#define CELER_MAX_NORM_GROWTH 16             /* normalized bytes per input byte ... */
#endif
#ifndef CELER_MAX_NORM_SLACK
#define CELER_MAX_NORM_SLACK 4096            /* ... plus this many, for the whole normalizer chain */
#endif
#ifndef CELER_MAX_REGEX_SCAN
#define CELER_MAX_REGEX_SCAN 16              /* bytes a regex may rescan per input byte ... */
#endif
#ifndef CELER_MAX_REGEX_SCAN_SLACK
#define CELER_MAX_REGEX_SCAN_SLACK (1u << 20) /* ... plus this many, per split of one piece */
#endif
#ifndef CELER_REGEX_MATCH_LIMIT
#define CELER_REGEX_MATCH_LIMIT 10000000     /* pcre2_set_match_limit: backtracking steps per match */
#endif
#ifndef CELER_REGEX_DEPTH_LIMIT
#define CELER_REGEX_DEPTH_LIMIT 100000       /* pcre2_set_depth_limit: nested backtracking points per match */
#endif
#ifndef CELER_REGEX_HEAP_LIMIT
#define CELER_REGEX_HEAP_LIMIT (64u << 10)   /* pcre2_set_heap_limit, in KiB: backtracking memory per match */
#endif

/* ---- chat templates (src/tokenizer/jinja.c) ---- */
#ifndef CELER_MAX_TEMPLATE_BYTES
#define CELER_MAX_TEMPLATE_BYTES (1u << 20)  /* template source */
#endif
#ifndef CELER_MAX_TEMPLATE_OUTPUT
#define CELER_MAX_TEMPLATE_OUTPUT (32u << 20) /* bytes one render may produce */
#endif
#ifndef CELER_MAX_TEMPLATE_DEPTH
#define CELER_MAX_TEMPLATE_DEPTH 200         /* nested blocks and parenthesized expressions; macro calls */
#endif
#ifndef CELER_MAX_TEMPLATE_EXPR_DEPTH
#define CELER_MAX_TEMPLATE_EXPR_DEPTH 500    /* height of one expression's tree: operators, filter
                                              * chains, attributes, calls, nested inside each other */
#endif
#ifndef CELER_MAX_TEMPLATE_NESTING
#define CELER_MAX_TEMPLATE_NESTING 2000      /* evaluation frames open at once while rendering:
                                              * expressions, blocks, macro calls, values printed */
#endif
#ifndef CELER_MAX_TEMPLATE_RANGE
#define CELER_MAX_TEMPLATE_RANGE 1000000     /* elements of one range() */
#endif
#ifndef CELER_MAX_TEMPLATE_STEPS
#define CELER_MAX_TEMPLATE_STEPS 10000000    /* steps of one render: statements, loop iterations,
                                              * elements visited, CELER_TEMPLATE_STEP_BYTES bytes */
#endif
#define CELER_TEMPLATE_STEP_BYTES 64         /* bytes read or written that count as one step */
#ifndef CELER_MAX_TEMPLATE_MEMORY
#define CELER_MAX_TEMPLATE_MEMORY (256u << 20) /* memory of one render: AST, values, scopes, buffers, output */
#endif

/* ---- grammars and JSON Schema (src/grammar/, docs/grammar.md) ---- */
#ifndef CELER_MAX_GRAMMAR_BYTES
#define CELER_MAX_GRAMMAR_BYTES (1u << 20)   /* GBNF text of one grammar */
#endif
#ifndef CELER_MAX_GRAMMAR_RULES
#define CELER_MAX_GRAMMAR_RULES 8192         /* rules, the ones repetition and groups add included */
#endif
#ifndef CELER_MAX_GRAMMAR_ELEMENTS
#define CELER_MAX_GRAMMAR_ELEMENTS (1u << 20) /* compiled elements (after {m,n} is expanded) */
#endif
#ifndef CELER_MAX_GRAMMAR_NESTING
#define CELER_MAX_GRAMMAR_NESTING 128        /* parentheses inside each other */
#endif
#ifndef CELER_MAX_GRAMMAR_REPEAT
#define CELER_MAX_GRAMMAR_REPEAT 1000        /* m and n of x{m,n} */
#endif
#ifndef CELER_MAX_GRAMMAR_STACKS
#define CELER_MAX_GRAMMAR_STACKS 4096        /* parses an automaton state follows at once (ambiguity) */
#endif
#ifndef CELER_MAX_GRAMMAR_DEPTH
#define CELER_MAX_GRAMMAR_DEPTH 4096         /* rules open inside each other while matching */
#endif
#ifndef CELER_MAX_SCHEMA_DEPTH
#define CELER_MAX_SCHEMA_DEPTH 64            /* nesting of JSON Schema subschemas */
#endif
#ifndef CELER_MAX_SCHEMA_GBNF
#define CELER_MAX_SCHEMA_GBNF (1u << 20)     /* GBNF bytes one schema converts to */
#endif

/* ---- `celer serve` defaults (src/server/, flags in src/cli/cmd_serve.c) ---- */
#define CELER_SERVE_MAX_BODY (8u << 20)      /* --max-body: request body bytes (413 above) */
#define CELER_SERVE_QUEUE 64                 /* --queue-size: requests waiting for a slot (503 above) */
#define CELER_SERVE_MAX_CONCURRENT 256       /* --max-concurrent: open connections (503 above) */
#define CELER_SERVE_TIMEOUT_S 600            /* --timeout: seconds a connection may sit idle */
#define CELER_SERVE_HEADER_TIMEOUT_S 10      /* --header-timeout: seconds to complete the request headers (408) */
#define CELER_SERVE_MIN_BODY_RATE 1024       /* --min-body-rate: body bytes/s at least, after --header-timeout s (408) */
#define CELER_SERVE_REQUESTS_RAM_MIB 1024    /* --requests-ram: MiB of bodies and parsing, all requests (503 above) */
#define CELER_SERVE_REQUEST_MEM_FACTOR 16    /* one request's memory: 16 x its body ... */
#define CELER_SERVE_REQUEST_MEM_BASE (1u << 20) /* ... + 1 MiB (413 above): what parsing it may cost */
#define CELER_SERVE_ANSWER_FACTOR 8          /* a /tokenize answer: 8 x the body + 1 MiB (413 above) */
/* --max-prompt (prompt tokens) and --max-tokens (generated tokens per request)
 * default to the context size (-c), which bounds both anyway. */
#define CELER_SERVE_MAX_STOP 16              /* strings in "stop" */
#define CELER_SERVE_MAX_N 128                /* choices in "n" (and at most the slots) */
#define CELER_SERVE_MAX_TOP_LOGPROBS 20      /* "top_logprobs", "logprobs", "n_probs" */
#endif
