/* cli/main.c: the `celer` command: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "celer.h"
#include "cli/commands.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *about;
} commands[] = {
    {"run", cmd_run, "chat with a model (the embedded default model when none is given)"},
    {"generate", cmd_generate, "generate from token ids, text or a chat message (greedy or sampled)"},
    {"logits", cmd_logits, "write the logits after every input token to a safetensors file"},
    {"bench", cmd_bench, "measure prefill and decode speed (llama-bench style)"},
    {"synth", cmd_synth, "write a random-weight checkpoint of a published model's shape"},
    {"tokenize", cmd_tokenize, "text (JSON strings, one per line) to token ids"},
    {"detokenize", cmd_detokenize, "token ids (JSON arrays, one per line) to text"},
    {"chat-template", cmd_chat_template, "render the tokenizer's chat template for a list of messages"},
    {"cache", cmd_cache, "evaluate tokens from and/or into a KV cache file (--load-cache, --save-cache)"},
    {"serve", cmd_serve, "serve the model over an OpenAI-compatible HTTP API (llama-server flags)"},
    {"inspect", cmd_inspect, "parameters, weight bytes and formats, KV bytes per context, and whether it fits in memory"},
    {"pull", cmd_pull, "download a model from the Hugging Face hub into its cache (ORG/NAME[@REVISION])"},
    {"arch", cmd_arch, "list the model families (config.json model_type values) celer loads"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: celer COMMAND [options]   (celer COMMAND --help for its options;\n"
               "       celer --help-env for the environment variables)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].about);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "help") == 0 && argc > 2) { /* celer help CMD: CMD's own --help */
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                char *h[] = {"--help", NULL};
                return commands[i].run(1, h);
            }
        fprintf(stderr, "celer: error: help: unknown command '%s'\n", argv[2]);
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--help-env") == 0) {
        celer_settings_print(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "celer: error: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
