/* tokenizer.h — text <-> token ids, as llama.cpp does it.
 *
 * Two models: SentencePiece-style ("llama" in GGUF: scores, byte fallback,
 * "▁" space escaping) and byte-level BPE ("gpt2": merges by rank, with a
 * pre-tokenizer regex chosen by tokenizer.ggml.pre: gpt2, llama-bpe, qwen2,
 * qwen35, ... run through PCRE2 for Unicode classes). Special/control tokens
 * are matched in the text when parse_special is set. Loaded from GGUF
 * metadata or from a Hugging Face tokenizer.json (+ tokenizer_config.json).
 * The tokenizer owns copies of everything it needs; the GGUF may be closed.
 * A tokenizer is immutable after loading: encode/decode may run concurrently.
 *
 * Conformance: ids and decoded text match llama.cpp v0.4.0 (tests/
 * test_tokenizer.c, tests/t_tokenizer_llamacpp.sh). Known limits: PCRE2's
 * Unicode tables (14.0 for PCRE2 10.42) decide \p{L}/\p{N}/\p{M}, so letters
 * newer than that split differently from llama.cpp; a tokenizer.json NFC
 * normalizer is not applied; pre-tokenizers whose llama.cpp splitter is not a
 * plain regex (tekken, gpt-4o, kimi-k2, superbpe, afmoe, gemma4, ...) and the
 * WPM/UGM/RWKV models are BRISK_ERR_UNSUPPORTED. Files: vocab.c (tables,
 * GGUF, special-token rules), hfjson.c, pretok.c (regexes, UTF-8, byte map),
 * spm.c, bpe.c, tokenizer.c (encode/decode).
 */
#ifndef BK_TOKENIZER_H
#define BK_TOKENIZER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"
#include "format/gguf.h"

typedef struct tokenizer tokenizer;

typedef enum tokenizer_kind { TOKENIZER_SPM = 1, TOKENIZER_BPE = 2 } tokenizer_kind;

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    TOKEN_TYPE_NORMAL = 1, TOKEN_TYPE_UNKNOWN = 2, TOKEN_TYPE_CONTROL = 3,
    TOKEN_TYPE_USER_DEFINED = 4, TOKEN_TYPE_UNUSED = 5, TOKEN_TYPE_BYTE = 6
};

brisk_status tokenizer_from_gguf(const gguf_file *g, tokenizer **out);
/* config_path may be NULL. */
brisk_status tokenizer_from_hf_json(const char *tokenizer_json_path, const char *config_path,
                                    tokenizer **out);
void tokenizer_free(tokenizer *t);

tokenizer_kind tokenizer_get_kind(const tokenizer *t);
int32_t tokenizer_n_vocab(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t); /* -1 if none */
/* From tokenizer.json: the llama.cpp pre-tokenizer name (qwen2, qwen35) whose
 * regexes this tokenizer's pre-tokenizer equals exactly; NULL if none. */
const char *tokenizer_pre_family(const tokenizer *t);
int32_t tokenizer_eos(const tokenizer *t);
bool tokenizer_add_bos(const tokenizer *t);
int32_t tokenizer_fim(const tokenizer *t, int kind); /* a brisk_fim kind's token, -1 if none */
bool tokenizer_add_eos(const tokenizer *t);
bool tokenizer_is_eog(const tokenizer *t, int32_t id); /* eos, eot, eom, <|im_end|>, ... */
int32_t tokenizer_token_type(const tokenizer *t, int32_t id);
/* The vocabulary entry as stored (e.g. "▁the", "Ġthe"); NULL if out of range. */
const char *tokenizer_token_text(const tokenizer *t, int32_t id, size_t *len);

/* Encodes text. add_special: BOS/EOS per the metadata; parse_special: control
 * and user-defined token texts in the input become their ids. Writes at most
 * cap ids and sets *n_out to the full count (BRISK_ERR_RANGE if > cap). */
brisk_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t *out, int64_t cap, int64_t *n_out);
/* Raw bytes of one token's text ("▁"->" ", byte tokens -> the byte, BPE byte
 * mapping undone). Control tokens give "" unless special. *len may exceed cap
 * (then nothing past cap is written; BRISK_ERR_RANGE). */
brisk_status tokenizer_token_to_piece(const tokenizer *t, int32_t id, bool special, char *buf,
                                      size_t cap, size_t *len);
/* Decodes a sequence to text like llama.cpp's llama_detokenize(remove_special=false,
 * unparse_special=special), including SPM's leading-space removal. */
brisk_status tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool special,
                              char *buf, size_t cap, size_t *len);
#endif
