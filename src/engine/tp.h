/* tp.h — tensor parallelism across processes: one process per GPU, rank 0
 * runs the command, the other ranks mirror its model and context calls.
 *
 * The math is model/llama.c's and engine/shard.h's: every rank loads its
 * shard of the weights (brisk_model_params.tp_rank / tp_size) and runs the
 * same forward pass on the same batch; the backend's all_reduce sums the two
 * column-split products per layer (in a qwen3moe layer the second sums the
 * ranks' expert outputs: its experts are placed by expert, model/qwen3moe.c).
 * On CUDA that is ncclAllReduce on the backend's stream, captured in the
 * decode step's graph (cuda_nccl.cu). Only rank 0 samples: every rank
 * computes the same logits, the others discard them.
 *
 * Pipeline parallelism (brisk_model_params.pp_size, --pp N) uses the same
 * ranks, link and messages: a model loaded with pp_size > 0 (tp_model_load
 * passes it on) gives each rank pp_rank and its run of layers instead of a
 * shard, tp_attach gives its CUDA backend the communicator for the p2p op,
 * and every rank's brisk_decode runs engine/context.c's pp_forward schedule
 * on the mirrored batch (only rank 0 computes logits).
 *
 * Processes. `brisk run|bench|serve --tp N` on one host: rank 0 (the command)
 * starts N-1 workers, each a fork + exec of /proc/self/exe with
 *   BRISK_TP_RANK=r  BRISK_TP_SIZE=N  BRISK_TP_DEVICE=--device + r  BRISK_TP_FD=fd
 * where fd is its end of a socketpair with rank 0 (stdin and stdout /dev/null).
 * Across hosts a launcher starts the same command line on every rank with
 * BRISK_TP_RANK (or OMPI_COMM_WORLD_RANK / PMI_RANK), BRISK_TP_SIZE (or
 * OMPI_COMM_WORLD_SIZE / PMI_SIZE), BRISK_TP_DEVICE (or the launcher's local
 * rank; else the rank) and BRISK_TP_ADDR=host:port: rank 0 listens on port,
 * every other rank connects to host:port and sends its rank (int32). A
 * process whose environment names it a rank > 0 (with BRISK_TP_FD or
 * BRISK_TP_ADDR) never runs the command: main() hands it to tp_worker_main.
 *
 * Protocol (rank 0 to each worker over its socket; same binary, so structs
 * travel as bytes): a tp_msg header {op, a[3], bytes} then `bytes` of payload.
 *   TP_MODEL_LOAD     brisk_model_params, path       -> reply {status, length, message}
 *   TP_CONTEXT_NEW    brisk_context_params, NCCL id (128 bytes, fresh per context:
 *                     ncclCommInitRank runs in every rank's brisk_context_new)
 *   TP_DECODE         a[0] entries: brisk_batch_entry[a[0]]   (each step: tokens,
 *                     positions, sequences, wants-logits flags)
 *   TP_SEQ_CLEAR a[0] / TP_SEQ_REMOVE a[0..2] / TP_SEQ_SHARE a[0..2] /
 *   TP_SEQ_CHECKPOINT a[0]: the cache operations, as the brisk_seq_* calls
 *   TP_CONTEXT_FREE, TP_QUIT (or the socket closing: rank 0 is gone)
 * Only a load is answered: a worker that fails later says why on stderr and
 * exits; rank 0 then waits in its next collective (NCCL has no peer timeout).
 *
 * In-process ranks (tests/test_tp.c): tp_link_local gives a link whose
 * tp_attach calls the test's hook (a CPU backend with an all_reduce that
 * sums the ranks' buffers across threads) and whose mirror calls do nothing:
 * the test drives every rank itself. */
#ifndef BK_TP_H
#define BK_TP_H
#include "backend/backend.h"
#include "brisk.h"

typedef struct tp_link tp_link;
struct brisk_model;

enum { TP_MODEL_LOAD = 1, TP_CONTEXT_NEW, TP_DECODE, TP_SEQ_CLEAR, TP_SEQ_REMOVE, TP_SEQ_SHARE, TP_SEQ_CHECKPOINT,
       TP_CONTEXT_FREE, TP_QUIT };

/* ---- setting up (the CLI) ---- */
/* Rank 0 of n_ranks: starts the workers on this host (devices device0 + 1 ..), or with
 * BRISK_TP_ADDR in the environment waits for the launcher's ranks to connect. n_ranks 1: no
 * other process (the NCCL path on one GPU). *out is freed by tp_link_free (or by the model
 * tp_model_load made). */
brisk_status tp_launch(int n_ranks, int device0, tp_link **out);
/* True when the environment makes this process a worker rank (see above). */
bool tp_env_is_worker(void);
/* A worker's whole life: connects to rank 0 and serves its messages until TP_QUIT or the socket
 * closes. BRISK_OK when it ended normally. */
brisk_status tp_worker_main(void);
/* Rank 0: loads the model at path as rank 0 of the link's ranks with mp, while every worker loads
 * its shard; fails (with the worker's message) when any rank fails. The model owns t afterwards
 * (brisk_model_free sends TP_QUIT and waits for the workers); on failure t stays the caller's. */
brisk_status tp_model_load(tp_link *t, const char *path, const brisk_model_params *mp, struct brisk_model **out);
/* Sends TP_QUIT, closes the sockets, waits for the workers started here (NULL: no-op). */
void tp_link_free(tp_link *t);

/* ---- in-process ranks (tests) ---- */
/* Called for each backend of each rank's context: must give be an all_reduce over the ranks. */
typedef brisk_status (*tp_attach_fn)(void *user, bk_backend *be, int rank);
brisk_status tp_link_local(tp_attach_fn attach, void *user, tp_link **out);

/* ---- the context's hooks (engine/context.c); no-ops for a model without tensor parallelism ---- */
/* Before a context is made: rank 0 makes a fresh NCCL id and sends TP_CONTEXT_NEW to the workers. */
brisk_status tp_context_begin(const struct brisk_model *m, const brisk_context_params *p);
/* A new backend of the context: the communicator on it (or the test's hook). */
brisk_status tp_attach(const struct brisk_model *m, bk_backend *be);
/* Rank 0: sends op with arguments a (3 ints, may be NULL) and a payload to every worker. */
brisk_status tp_mirror(const struct brisk_model *m, int op, const int32_t *a, const void *data, size_t bytes);
#endif
