/* cli.h — the `brisk` subcommands. Each returns the process exit status
 * (0 ok, 1 runtime failure, 2 bad usage) and prints one-line errors as
 * "brisk: <message>" on stderr. */
#ifndef BK_CLI_H
#define BK_CLI_H
/* brisk's version (`brisk --version`, which adds the git commit the binary was built from). */
#define BRISK_VERSION "0.1.0"
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_pull(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_rm(int argc, char **argv);

/* Prints "brisk: <fmt>" + newline to stderr and returns code. */
int cli_error(int code, const char *fmt, ...);
#endif
