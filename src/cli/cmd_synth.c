/* cli/cmd_synth.c: placeholder replaced below */
#include "cli/commands.h"
int cmd_synth(int argc, char **argv) { (void)argc; (void)argv; return 2; }
