/* cli/commands.h: one entry point per subcommand; each returns the exit status. */
#ifndef CELER_CLI_COMMANDS_H
#define CELER_CLI_COMMANDS_H
int cmd_generate(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_chat_template(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_arch(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_pull(int argc, char **argv);
#endif
