/* cmd_chat.c — `brisk chat` (and `brisk run -cnv`): a conversation on the terminal through the
 * model's chat template, rendered as the server renders it (server/chat.h).
 *
 * Each turn renders the whole conversation again; only the tokens past the longest prefix that
 * sequence 0 of the KV cache still holds are prefilled. A recurrent model (Gated DeltaNet) cannot
 * rewind its state, so each prompt leaves a state checkpoint a few tokens before its end, and a
 * later turn that diverges inside the previous answer restarts there (brisk_seq_keepable). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "brisk.h"
#include "cli/cli.h"
#include "cli/common.h"
#include "server/chat.h"
#include "server/strbuf.h"

/* The checkpoint stays this many tokens before a prompt's end: the generation prompt
 * ("<|im_start|>assistant\n<think>\n") is rendered differently once it is history. */
#define CKPT_MARGIN 4
#define CHAT_CKPTS 4 /* state snapshots kept: the last prompts' */

static void usage(FILE *f) {
    fprintf(f,
            "usage: brisk chat -m FILE | -hf REPO[:QUANT] [options]\n"
            "A conversation with the model through its chat template (ChatML when it has none).\n"
            "Type a message and Enter. A line ending in \\ continues on the next; a line \"\"\" opens a block\n"
            "that a line \"\"\" closes. Ctrl-C stops an answer; at the prompt, twice, or Ctrl-D, exits.\n"
            "Commands: /clear (forget the conversation, keep -sys), /save FILE, /load FILE (the conversation\n"
            "as JSON: {\"messages\": [{\"role\", \"content\"}...]}), /help, /exit.\n"
            "  -m, --model FILE     GGUF model\n"
            "  -sys, --system-prompt TEXT  the system message (-p, --prompt TEXT too, as llama.cpp's -cnv)\n"
            "  -n, --n-predict N    most tokens an answer may have (default -1: until end of turn or context)\n"
            "  -c, --ctx-size N     context size (default: model's, at most 4096)\n"
            "  -t, --threads N      CPU threads (default: all cores)\n"
            CLI_SAMPLER_HELP
            CLI_STOP_HELP
            "  --no-think-display   hide the model's reasoning (<think>...</think>); by default it is shown,\n"
            "                       dimmed on a terminal\n"
            "  --chat-template FILE a Jinja chat template instead of the model's (\"chatml\": built-in ChatML)\n"
            "  -v, --verbose        each turn's rendered prompt and a line of token counts on stderr\n"
            "  -cnv, --conversation, --no-display-prompt  accepted (chat is always one, and shows no prompt)\n"
            "  -b, --batch-size N   prompt tokens per call (default 2048), run in passes of -ub\n"
            CLI_MODEL_HELP);
}

/* Ctrl-C: a flag the answer loop and the prompt read (no SA_RESTART, so a read in progress
 * returns EINTR). */
static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct chat {
    brisk_model *model;
    brisk_context *ctx;
    chat_fmt *fmt;
    brisk_sampler_params sp;
    cJSON *messages;          /* [{role, content}], the system message first when there is one */
    const char *system;       /* -sys, or NULL */
    brisk_token *cache;       /* (ctx_size) the tokens sequence 0 holds, n_cache of them */
    int n_cache, ctx_size, n_predict, n_batch; /* n_batch: prompt tokens per forward pass (-b) */
    brisk_batch_entry *batch; /* (n_batch) */
    bool verbose, think_display, tty_out, ckpt;
    cli_stop stop;
} chat;

static bool add_message(cJSON *messages, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) || !cJSON_AddStringToObject(m, "content", content)) {
        cJSON_Delete(m);
        return false;
    }
    cJSON_AddItemToArray(messages, m);
    return true;
}

/* The conversation back to the system message alone. false on OOM. */
static bool chat_clear(chat *c) {
    cJSON_Delete(c->messages);
    c->messages = cJSON_CreateArray();
    return c->messages && (!c->system || add_message(c->messages, "system", c->system));
}

static int common_prefix(const brisk_token *a, int na, const brisk_token *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Keeps the longest prefix of the cache that toks[0, n - 1) starts with (the last prompt token is
 * always decoded again: it gives the logits) and that the model can return to. Returns its length. */
static int reuse_prefix(chat *c, const brisk_token *toks, int n) {
    int l = common_prefix(c->cache, c->n_cache, toks, n - 1);
    l = brisk_seq_keepable(c->ctx, 0, l);
    if (l < c->n_cache && brisk_seq_remove(c->ctx, 0, l, -1) != BRISK_OK) {
        brisk_seq_clear(c->ctx, 0); /* not expected after brisk_seq_keepable: start over */
        l = 0;
    }
    c->n_cache = l;
    return l;
}

/* Feeds toks[n_cache, n) to sequence 0; *row is the last token's logits row. With checkpoints, one
 * pass ends CKPT_MARGIN tokens before the end and the state is saved there. */
static bool prefill(chat *c, const brisk_token *toks, int n, int *row) {
    int ck = c->ckpt ? n - CKPT_MARGIN : -1;
    while (c->n_cache < n) {
        int p0 = c->n_cache, end = p0 + c->n_batch < n ? p0 + c->n_batch : n;
        if (ck > p0 && ck < end) end = ck;
        for (int p = p0; p < end; p++) c->batch[p - p0] = (brisk_batch_entry){toks[p], p, 0, p == n - 1};
        if (brisk_decode(c->ctx, c->batch, end - p0) != BRISK_OK) {
            cli_error(1, "%s", brisk_last_error());
            return false;
        }
        memcpy(c->cache + p0, toks + p0, (size_t)(end - p0) * sizeof *toks);
        c->n_cache = end;
        *row = end - p0 - 1;
        if (end == ck) brisk_seq_checkpoint(c->ctx, 0); /* a failure only costs a later turn its reuse */
    }
    return true;
}

/* Prints what the parser classified since the last call and moves it into the answer: reasoning
 * dimmed on a terminal (plain otherwise, nothing with --no-think-display), then content. */
static void show(chat *c, chat_parser *p, strbuf *content, strbuf *reasoning, bool *in_think) {
    if (p->reasoning.len) {
        if (c->think_display) {
            if (c->tty_out && !*in_think) fputs("\033[2m", stdout);
            fwrite(p->reasoning.p, 1, p->reasoning.len, stdout);
            *in_think = true;
        }
        sb_append(reasoning, p->reasoning.p, p->reasoning.len);
        sb_reset(&p->reasoning);
    }
    if (p->content.len) {
        if (*in_think) {
            fputs(c->tty_out ? "\033[0m\n" : "\n", stdout);
            *in_think = false;
        }
        fwrite(p->content.p, 1, p->content.len, stdout);
        sb_append(content, p->content.p, p->content.len);
        sb_reset(&p->content);
    }
    fflush(stdout);
}

/* Generates the answer to the prompt toks (n, all in the cache now; logits in row); streams it and
 * appends it to the conversation. false on a failed decode. */
static bool answer(chat *c, const brisk_token *toks, int n, int row, bool opens_think, int *n_gen) {
    brisk_sampler *smp = NULL;
    if (brisk_sampler_new(&c->sp, brisk_n_vocab(c->model), &smp) != BRISK_OK) {
        cli_error(1, "%s", brisk_last_error());
        return false;
    }
    for (int i = 0; i < n; i++) brisk_sampler_accept(smp, toks[i]); /* the penalties look back over it */
    chat_parser p;
    chat_parser_init(&p, false, opens_think);
    strbuf content = {0}, reasoning = {0};
    brisk_detok dt = {0};
    bool ok = true, in_think = false;
    cli_stop_reset(&c->stop);
    const float *logits = brisk_get_logits(c->ctx, row);
    *n_gen = 0;
    while ((c->n_predict < 0 || *n_gen < c->n_predict) && !interrupted) {
        brisk_token t = brisk_sampler_sample(smp, logits);
        if (brisk_token_is_eog(c->model, t)) break;
        brisk_sampler_accept(smp, t);
        char out[1100];
        size_t len = 0;
        bool stopped = false;
        if (brisk_detok_push(c->model, &dt, t, out, sizeof out, &len) == BRISK_OK && len) {
            chat_parser_push(&p, out, len, false);
            show(c, &p, &content, &reasoning, &in_think);
            stopped = cli_stop_push(&c->stop, out, len);
        }
        ++*n_gen;
        if (stopped || c->n_cache >= c->ctx_size) break;
        c->batch[0] = (brisk_batch_entry){t, c->n_cache, 0, true};
        if (brisk_decode(c->ctx, c->batch, 1) != BRISK_OK) {
            ok = cli_error(1, "%s", brisk_last_error()) == 0;
            break;
        }
        c->cache[c->n_cache++] = t;
        logits = brisk_get_logits(c->ctx, 0);
    }
    chat_parser_push(&p, "", 0, true);
    show(c, &p, &content, &reasoning, &in_think);
    if (in_think && c->tty_out) fputs("\033[0m", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (interrupted) {
        fputs("(interrupted)\n", stderr);
        interrupted = 0;
    }
    /* the answer so far is the conversation's, interrupted or not */
    cJSON *m = cJSON_CreateObject();
    if (m && cJSON_AddStringToObject(m, "role", "assistant") &&
        cJSON_AddStringToObject(m, "content", content.p ? content.p : "") &&
        (!reasoning.len || cJSON_AddStringToObject(m, "reasoning_content", reasoning.p)))
        cJSON_AddItemToArray(c->messages, m);
    else {
        cJSON_Delete(m);
        ok = cli_error(1, "out of memory") == 0;
    }
    sb_free(&content);
    sb_free(&reasoning);
    chat_parser_free(&p);
    brisk_sampler_free(smp);
    return ok;
}

/* One turn: the user's message, the prompt rendered and prefilled past the cached prefix, the
 * answer. false: a failure that ends the chat (a prompt too long for the context is only said). */
static bool chat_turn(chat *c, const char *user) {
    if (!add_message(c->messages, "user", user)) return cli_error(1, "out of memory") == 0;
    char *text = NULL;
    size_t len = 0;
    if (chat_fmt_render(c->fmt, c->messages, NULL, true, &text, &len) != BRISK_OK) {
        cli_error(1, "chat template: %s", brisk_last_error());
        cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
        return true;
    }
    if (c->verbose) fprintf(stderr, "--- prompt ---\n%s\n--- end of prompt ---\n", text);
    brisk_token *toks = NULL;
    int64_t n = 0;
    if (!cli_tokenize(c->model, text, len, !chat_prompt_has_bos(c->model, text, len), true, &toks, &n)) {
        free(text);
        return false;
    }
    bool ok = true;
    if (n < 1 || n >= c->ctx_size) {
        cli_error(1, "chat: the conversation has %lld tokens, the context %d: /clear it, or a larger -c",
                  (long long)n, c->ctx_size);
        cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
        goto done;
    }
    double t0 = cli_now();
    int reused = reuse_prefix(c, toks, (int)n), row = 0, n_gen = 0;
    if (!(ok = prefill(c, toks, (int)n, &row))) goto done;
    double t1 = cli_now();
    ok = answer(c, toks, (int)n, row, chat_prompt_opens_think(text, len), &n_gen);
    double t2 = cli_now();
    if (c->verbose)
        fprintf(stderr, "chat: prompt %lld tokens, %d from the cache, %lld prefilled in %.3f s; answer %d tokens "
                "in %.3f s (%.2f tokens/s)\n", (long long)n, reused, (long long)n - reused, t1 - t0, n_gen,
                t2 - t1, n_gen > 0 ? n_gen / (t2 - t1) : 0.0);
done:
    free(toks);
    free(text);
    return ok;
}

/* /save FILE: the conversation as {"messages": [...]}, written atomically. */
static void chat_save(const chat *c, const char *path) {
    cJSON *root = cJSON_CreateObject();
    char *js = NULL;
    if (root && cJSON_AddItemReferenceToObject(root, "messages", c->messages)) js = cJSON_Print(root);
    cJSON_Delete(root); /* a reference: the messages stay */
    atomic_file *af = NULL;
    if (!js) cli_error(1, "/save: out of memory");
    else if (atomic_file_open(path, &af) != BRISK_OK) cli_error(1, "/save: %s", brisk_last_error());
    else {
        fputs(js, atomic_file_stream(af));
        fputc('\n', atomic_file_stream(af));
        if (atomic_file_commit(af) != BRISK_OK) cli_error(1, "/save: %s", brisk_last_error());
        else fprintf(stderr, "saved %d messages to %s\n", cJSON_GetArraySize(c->messages), path);
    }
    free(js);
}

/* /load FILE: a conversation that /save wrote (or a bare array of messages) replaces this one. */
static void chat_load(chat *c, const char *path) {
    size_t len;
    char *text = cli_read_all(path, &len); /* says why it failed */
    if (!text) return;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    cJSON *msgs = cJSON_IsArray(root) ? root : cJSON_GetObjectItemCaseSensitive(root, "messages");
    bool ok = cJSON_IsArray(msgs);
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role) || !cJSON_IsString(content)) ok = false;
    }
    if (!ok) {
        cli_error(1, "/load: %s: expected {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}", path);
        cJSON_Delete(root);
        return;
    }
    cJSON *copy = cJSON_Duplicate(msgs, true);
    cJSON_Delete(root);
    if (!copy) {
        cli_error(1, "/load: out of memory");
        return;
    }
    cJSON_Delete(c->messages);
    c->messages = copy;
    fprintf(stderr, "loaded %d messages from %s\n", cJSON_GetArraySize(copy), path);
}

/* Reads one message into msg: a line, lines joined while one ends in '\', or a """ block.
 * 1: a message; 0: end of input; -1: Ctrl-C. */
static int read_message(bool tty, strbuf *msg) {
    char *line = NULL;
    size_t cap = 0;
    bool block = false, first = true;
    int r = 1;
    sb_reset(msg);
    for (;;) {
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            bool intr = interrupted || errno == EINTR;
            clearerr(stdin);
            r = intr ? -1 : msg->len ? 1 : 0; /* a last unfinished message still counts */
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (first && !strncmp(line, "\"\"\"", 3)) {
            block = true;
            first = false;
            if (n > 3) sb_printf(msg, "%s\n", line + 3);
        } else if (block && n >= 3 && !strcmp(line + n - 3, "\"\"\"")) {
            sb_append(msg, line, (size_t)n - 3);
            break;
        } else if (block) {
            sb_printf(msg, "%s\n", line);
        } else if (n && line[n - 1] == '\\') {
            sb_append(msg, line, (size_t)n - 1);
            sb_puts(msg, "\n");
        } else {
            sb_append(msg, line, (size_t)n);
            break;
        }
        first = false;
        if (tty) fputs("... ", stdout), fflush(stdout);
    }
    if (r == 1 && msg->len && msg->p[msg->len - 1] == '\n' && block) msg->p[--msg->len] = 0;
    free(line);
    return r;
}

/* A /command; false: /exit. */
static bool command(chat *c, const char *cmd) {
    const char *arg = strchr(cmd, ' ');
    while (arg && *arg == ' ') arg++;
    size_t n = strcspn(cmd, " ");
    if (n == 6 && !strncmp(cmd, "/clear", n)) {
        if (!chat_clear(c)) cli_error(1, "out of memory");
        else fputs("(conversation cleared)\n", stderr);
    } else if ((n == 5 && !strncmp(cmd, "/save", n)) || (n == 5 && !strncmp(cmd, "/load", n))) {
        if (!arg || !*arg) cli_error(2, "%.5s needs a file name", cmd);
        else if (cmd[1] == 's') chat_save(c, arg);
        else chat_load(c, arg);
    } else if ((n == 5 && !strncmp(cmd, "/exit", n)) || (n == 5 && !strncmp(cmd, "/quit", n)) ||
               (n == 4 && !strncmp(cmd, "/bye", n))) {
        return false;
    } else if (n == 5 && !strncmp(cmd, "/help", n)) {
        fputs("/clear  /save FILE  /load FILE  /exit; \\ at a line's end continues it; \"\"\" opens and closes a "
              "block; // starts a message with /\n", stderr);
    } else {
        cli_error(2, "unknown command '%.*s' (/help lists them; // starts a message with /)", (int)n, cmd);
    }
    return true;
}

/* The read-answer loop; 0 at the end of input, 1 after a failure. */
static int chat_loop(chat *c) {
    bool tty_in = isatty(0);
    strbuf msg = {0};
    int rc = 0, n_intr = 0;
    for (;;) {
        if (tty_in) fputs("> ", stdout), fflush(stdout);
        int r = read_message(tty_in, &msg);
        if (r == 0) {
            if (tty_in) fputc('\n', stdout);
            break;
        }
        if (r < 0) {
            interrupted = 0;
            if (++n_intr >= 2) {
                fputc('\n', stdout);
                break;
            }
            fputs("\n(Ctrl-C again, or Ctrl-D, exits)\n", stderr);
            continue;
        }
        n_intr = 0;
        const char *text = msg.p ? msg.p : "";
        if (!*text) continue;
        if (text[0] == '/' && text[1] != '/') {
            if (!command(c, text)) break;
            continue;
        }
        if (!chat_turn(c, text[0] == '/' ? text + 1 : text)) {
            rc = 1;
            break;
        }
    }
    sb_free(&msg);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    const char *model_path = NULL, *template_path = NULL;
    int n_ctx = 0, n_threads = 0;
    bool seed_set = false;
    chat c = {.n_predict = -1, .n_batch = 2048, .think_display = true, .sp = brisk_sampler_default_params()};
    cli_model_opts mo = CLI_MODEL_OPTS_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int g = cli_model_flag(argc, argv, &i, &mo);
        if (!g) g = cli_sampler_flag(argc, argv, &i, &c.sp, &seed_set);
        if (!g) g = cli_stop_flag(argc, argv, &i, &c.stop);
        if (g) {
            if (g < 0) return 2;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        bool takes = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "-sys") ||
                     !strcmp(a, "--system-prompt") || !strcmp(a, "-p") || !strcmp(a, "--prompt") ||
                     !strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "-c") || !strcmp(a, "--ctx-size") ||
                     !strcmp(a, "-t") || !strcmp(a, "--threads") || !strcmp(a, "--chat-template") ||
                     !strcmp(a, "-b") || !strcmp(a, "--batch-size");
        if (takes && !(v = cli_next(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "-sys") || !strcmp(a, "--system-prompt") || !strcmp(a, "-p") || !strcmp(a, "--prompt"))
            c.system = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_int(a, v, -1, 1 << 30, &c.n_predict)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!cli_int(a, v, 0, 1 << 24, &n_ctx)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_int(a, v, 1, 1024, &n_threads)) return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (!cli_int(a, v, 1, 1 << 16, &c.n_batch)) return 2;
        } else if (!strcmp(a, "--chat-template")) template_path = v;
        else if (!strcmp(a, "--no-think-display")) c.think_display = false;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) c.verbose = true;
        else if (!strcmp(a, "-cnv") || !strcmp(a, "--conversation") || !strcmp(a, "--no-display-prompt")) {
        } else return cli_error(2, "chat: unknown option '%s' (try `brisk chat --help`)", a);
    }
    int hf_rc = cli_model_path(&mo, "chat", &model_path);
    if (hf_rc) return hf_rc;
    if (!seed_set) c.sp.seed = (uint64_t)(cli_now() * 1e9);
    c.tty_out = isatty(1);

    int rc = 1;
    char *template_src = NULL;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    cp.n_batch = c.n_batch;
    cli_context_opts(&mo, &cp);
    cp.n_seq_checkpoints = CHAT_CKPTS; /* recurrent models: no-op otherwise */
    size_t tlen;
    if (template_path && strcmp(template_path, "chatml") && !(template_src = cli_read_all(template_path, &tlen)))
        goto done;
    if (!cli_load_model(model_path, &mo, &cp, &c.model)) goto done;
    if (!cli_new_context(c.model, &cp, &c.ctx)) goto done;
    if (chat_fmt_new(c.model, template_src ? template_src : template_path, &c.fmt) != BRISK_OK) {
        cli_error(1, "chat template: %s", brisk_last_error());
        goto done;
    }
    brisk_model_info info;
    brisk_model_get_info(c.model, &info);
    c.ctx_size = n_ctx > 0 ? n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    c.ckpt = brisk_context_n_checkpoints(c.ctx) > 0;
    c.cache = malloc((size_t)c.ctx_size * sizeof *c.cache);
    c.batch = malloc((size_t)c.n_batch * sizeof *c.batch);
    if (!c.cache || !c.batch || !chat_clear(&c)) {
        cli_error(1, "out of memory");
        goto done;
    }
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C at the prompt ends the read */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    rc = chat_loop(&c);
    sigaction(SIGINT, &old, NULL);
    cli_report_expert_cache(c.model, c.ctx);
done:
    cli_free_expert_stats(&cp);
    free(template_src);
    free(c.cache);
    free(c.batch);
    cJSON_Delete(c.messages);
    chat_fmt_free(c.fmt);
    brisk_context_free(c.ctx);
    brisk_model_free(c.model);
    return rc;
}
