#!/usr/bin/env python3
"""Reference vectors from Hugging Face transformers, for tests/test_hf_ref.c.

  python3 tools/train/hf_refs.py --tokenizer TOKDIR --out tests/data/hf
                                 [--random] [--trained DIR ...]

--random: for each architecture brisk converts (llama, qwen2, qwen3, qwen3_moe, qwen3_5,
  qwen3_5_moe, qwen3_next) a tiny random-init model built from a config by transformers itself, with
  every 1-D parameter (norms, biases, A_log, dt_bias) perturbed so no conversion rule is
  hidden by a default value; weights rounded to bf16 and saved (OUT/<name>/ config.json +
  model.safetensors; the tokenizer lives once in OUT/tokenizer/).
--trained: checkpoints from tools/train/train.py (weights f16).
For each model: the logits of a fixed prompt at every position and 64 greedy tokens,
computed in f32 on the CPU (eager attention, no TF32) on exactly the stored weights:
OUT/<name>.json (ids, greedy tokens, smallest top-1/top-2 margin seen) and
OUT/<name>.logits (f32 little-endian, [n_prompt][n_vocab])."""
import argparse, json, os, shutil, sys

import torch

PROMPT = "In the beginning God created the heaven and the earth. And the"
N_GREEDY = 64


def tiny_configs(V, eos):
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    base = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=128, max_position_embeddings=1024,
                rms_norm_eps=1e-6, initializer_range=0.05, eos_token_id=eos, bos_token_id=None,
                pad_token_id=eos, rope_parameters=rope)
    moe = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True)
    hyb = dict(num_hidden_layers=4, head_dim=64, linear_conv_kernel_dim=4, linear_key_head_dim=16,
               linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
               layer_types=["linear_attention"] * 3 + ["full_attention"], full_attention_interval=4,
               rope_parameters=dict(rope, partial_rotary_factor=0.25, mrope_section=[3, 3, 2],
                                    mrope_interleaved=True))
    return [
        ("rand-llama", "LlamaConfig", "LlamaForCausalLM", dict(base, tie_word_embeddings=False)),
        ("rand-qwen2", "Qwen2Config", "Qwen2ForCausalLM", dict(base, tie_word_embeddings=True)),
        ("rand-qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(base, head_dim=32, tie_word_embeddings=False)),
        ("rand-qwen3moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
         dict(base, **moe, head_dim=32, decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=True)),
        ("rand-qwen35", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(base, **hyb, tie_word_embeddings=True)),
        ("rand-qwen35moe", "Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM",
         dict(base, **hyb, **moe, shared_expert_intermediate_size=64, tie_word_embeddings=False)),
        # Qwen3-Next: Qwen3.5-MoE's layout before it (fused in_proj_qkvz / in_proj_ba, no MRoPE);
        # no full_attention_interval: transformers 5 keeps only layer_types, which brisk reads
        ("rand-qwen3next", "Qwen3NextConfig", "Qwen3NextForCausalLM",
         dict(base, **{k: v for k, v in hyb.items() if k not in ("full_attention_interval", "rope_parameters")},
              **moe, rope_parameters=dict(rope, partial_rotary_factor=0.25), shared_expert_intermediate_size=64,
              decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False)),
    ]


@torch.no_grad()
def reference(model, ids):
    """logits of the prompt at every position, and greedy tokens by full recomputation
    (no KV-cache code path involved), with the smallest top-1/top-2 margin."""
    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0].float()
    out, margin = [], float("inf")
    for _ in range(N_GREEDY):
        last = model(input_ids=x).logits[0, -1].float()
        top = torch.topk(last, 2)
        margin = min(margin, (top.values[0] - top.values[1]).item())
        nxt = int(top.indices[0])
        out.append(nxt)
        x = torch.cat([x, torch.tensor([[nxt]])], 1)
    return logits, out, margin


def write_ref(out, name, model, tok, source, extra):
    import transformers
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    logits, greedy, margin = reference(model, ids)
    # causality check on the reference itself: the prompt's logits must not move
    # when the greedy tokens follow them (transformers' qwen3_5_moe fails this on the CPU)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([ids + greedy])).logits[0, :len(ids)].float()
    causal = ((full - logits).abs().max() / logits.abs().max()).item()
    extra = dict(extra, hf_causality_rel_err=causal)
    with open(os.path.join(out, name + ".logits"), "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    if os.environ.get("HFREF_SEQ"):  # debugging: every position of prompt + greedy tokens
        with torch.no_grad():
            full = model(input_ids=torch.tensor([ids + greedy])).logits[0].float()
        with open(os.path.join(out, name + ".seq.logits"), "wb") as f:
            f.write(full.contiguous().numpy().astype("<f4").tobytes())
    meta = dict(name=name, arch=model.config.model_type, cls=type(model).__name__, source=source,
                prompt=PROMPT, prompt_ids=ids, n_vocab=int(logits.shape[-1]), greedy=greedy,
                min_greedy_margin=margin, transformers=transformers.__version__,
                torch=torch.__version__, **extra)
    json.dump(meta, open(os.path.join(out, name + ".json"), "w"), indent=1)
    print(f"{name}: {type(model).__name__} prompt {len(ids)} tokens, greedy {greedy[:8]}..., "
          f"min margin {margin:.2e}, |logits| max {logits.abs().max():.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--random", action="store_true")
    ap.add_argument("--trained", nargs="*", default=[])
    a = ap.parse_args()
    import transformers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(a.out, exist_ok=True)
    tok = PreTrainedTokenizerFast.from_pretrained(a.tokenizer)
    tdir = os.path.join(a.out, "tokenizer")
    if not os.path.exists(os.path.join(tdir, "tokenizer.json")):
        tok.save_pretrained(tdir)
    V, eos = len(tok), tok.convert_tokens_to_ids("<|endoftext|>")
    V = 4096 if V <= 4096 else V

    def load(d):
        return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()

    def random_model(name, cfg_name, model_name, kw):
        torch.manual_seed(7)
        model = getattr(transformers, model_name)(getattr(transformers, cfg_name)(**kw)).eval()
        with torch.no_grad():
            for _, p in model.named_parameters():
                if p.ndim == 1:
                    p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(a.out, name)
        model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
        write_ref(a.out, name, load(d), tok, "random-init, bf16 weights", dict(weights="bf16"))

    jobs = []
    if a.random:
        jobs += [(c[0], lambda c=c: random_model(*c)) for c in tiny_configs(V, eos)
                 if not os.environ.get("HFREF_ONLY") or c[0] in os.environ["HFREF_ONLY"].split(",")]
    for d in a.trained:
        name = os.path.basename(os.path.normpath(d))
        jobs.append((name, lambda d=d, name=name: write_ref(a.out, name, load(d), tok,
                                                             "tools/train/train.py, f16 weights",
                                                             dict(weights="f16"))))
    for name, job in jobs:
        try:  # one architecture failing must not lose the others
            job()
        except Exception as e:
            import traceback
            traceback.print_exc()
            print(f"!! {name} failed: {e}", flush=True)

if __name__ == "__main__":
    main()
