#!/usr/bin/env python3
"""Trains brisk's own small models on the King James Bible (tooling, not runtime).

Runs on a machine with PyTorch + transformers (the GPU machine); the corpus comes
from tools/train/corpus.sh (Debian's bible-kjv-text package).

  python3 tools/train/train.py --corpus kjv.txt --out OUT [--only tok,dense,draft,moe,hybrid]
                               [--budget SECONDS_PER_MODEL]

Writes, under OUT:
  tokenizer/            byte-level BPE (Qwen2 pre-tokenizer regex), 4096 tokens
  <name>/               HF checkpoint (f16 safetensors + config + tokenizer files),
                        loss.tsv (step, train loss, lr, val loss), samples.txt, summary.json
Models: dense (qwen3, ~6M params), draft (qwen3, ~1M, same tokenizer), moe (qwen3_moe,
8 experts top-2), hybrid (qwen3_5 text: Gated DeltaNet + gated attention).
Weights are trained in f32 with bf16 autocast and saved rounded to f16 (what ships);
the validation perplexity in summary.json is measured on those f16 weights."""
import argparse, json, math, os, random, sys, time

import torch

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 4096
# ChatML, as Qwen's templates write it (no tools: these are base models).
CHAT_TEMPLATE = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}"
                 "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def log(*a):
    print(*a, flush=True)


def chapters(corpus):
    text = open(corpus, encoding="utf-8").read()
    return [c.strip("\n") + "\n" for c in text.split("\n\n") if c.strip()]


def train_tokenizer(chaps, out):
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(chaps, trainer)
    # the three specials are already special tokens of `tok` (the trainer added them)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 2048
    os.makedirs(out, exist_ok=True)
    fast.save_pretrained(out)
    log(f"tokenizer: {tok.get_vocab_size()} tokens -> {out}")
    return fast


def encode_corpus(tok, chaps):
    """Every 100th chapter is held out for validation; documents end with <|endoftext|>."""
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    train, val = [], []
    enc = tok(chaps, add_special_tokens=False)["input_ids"]
    for i, ids in enumerate(enc):
        (val if i % 100 == 50 else train).extend(ids + [eos])
    return torch.tensor(train, dtype=torch.long), torch.tensor(val, dtype=torch.long)


def model_specs(tok):
    """name, config class, model class (transformers names, resolved when trained), kwargs, lr"""
    common = dict(vocab_size=VOCAB, max_position_embeddings=2048, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, bos_token_id=None,
                  eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                  pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    rope = dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return {
        "dense": ("brisk-kjv-6m", "Qwen3Config", "Qwen3ForCausalLM",
                  dict(common, **rope, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=64, intermediate_size=768), 3e-3),
        "draft": ("brisk-kjv-draft", "Qwen3Config", "Qwen3ForCausalLM",
                  dict(common, **rope, hidden_size=128, num_hidden_layers=3, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=64, intermediate_size=384), 4e-3),
        "moe": ("brisk-kjv-moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                dict(common, **rope, hidden_size=192, num_hidden_layers=4, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=64, intermediate_size=512,
                     num_experts=8, num_experts_per_tok=2, moe_intermediate_size=192,
                     norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                     output_router_logits=True, router_aux_loss_coef=0.01), 3e-3),
        "hybrid": ("brisk-kjv-hybrid", "Qwen3_5TextConfig", "Qwen3_5ForCausalLM",
                   dict(common, hidden_size=192, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=64, intermediate_size=512,
                        linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
                        linear_num_key_heads=2, linear_num_value_heads=4,
                        layer_types=["linear_attention"] * 3 + ["full_attention"],
                        full_attention_interval=4,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                         "partial_rotary_factor": 0.25,
                                         "mrope_section": [3, 3, 2], "mrope_interleaved": True}), 3e-3),
    }


@torch.no_grad()
def val_loss(model, val, T, dev, max_windows=64):
    model.eval()
    n = min(max_windows, (len(val) - 1) // T)
    tot, cnt = 0.0, 0
    for w in range(0, n, 16):
        b = min(16, n - w)
        x = torch.stack([val[(w + i) * T:(w + i) * T + T + 1] for i in range(b)]).to(dev)
        logits = model(input_ids=x[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 x[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item(); cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt


@torch.no_grad()
def sample(model, tok, dev, prompt, n=60, temp=0.0, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"].to(dev)
    for _ in range(n):
        logits = model(input_ids=ids).logits[0, -1].float()
        if temp <= 0:
            nxt = logits.argmax()
        else:
            nxt = torch.multinomial(torch.softmax(logits / temp, -1), 1, generator=g)[0]
        ids = torch.cat([ids, nxt.view(1, 1)], 1)
    return tok.decode(ids[0])


def train_one(key, spec, tok, train, val, out, budget, dev, batch=64, T=256, max_steps=6000):
    import transformers
    name, cfg_name, model_name, kw, lr = spec
    cfg_cls, model_cls = getattr(transformers, cfg_name), getattr(transformers, model_name)
    torch.manual_seed(1234); random.seed(1234)
    cfg = cfg_cls(**kw)
    model = model_cls(cfg).to(dev)
    nparam = sum(p.numel() for p in model.parameters())
    log(f"== {name}: {type(model).__name__}, {nparam/1e6:.2f}M parameters")
    decay = [p for n_, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n_, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    warm, probe0, probe = 50, 10, 40
    total = None
    rows = []
    best = (float("inf"), -1, None)
    t0 = time.time()
    step = 0
    while total is None or step < total:
        if step == probe0:  # the first steps pay for CUDA start-up: time the next ones
            torch.cuda.synchronize() if dev == "cuda" else None
            tp = time.time()
        if step == probe:  # fix the schedule from the measured step time
            torch.cuda.synchronize() if dev == "cuda" else None
            per = (time.time() - tp) / (probe - probe0)
            total = max(probe + 1, min(max_steps, int((budget - (time.time() - t0)) / per) + probe))
            log(f"   {per*1000:.1f} ms/step -> {total} steps")
        tot = total or max_steps
        cur = lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / tot))))
        for g in opt.param_groups:
            g["lr"] = cur
        ix = torch.randint(0, len(train) - T - 1, (batch,))
        x = torch.stack([train[i:i + T + 1] for i in ix.tolist()]).to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev == "cuda"):
            outp = model(input_ids=x[:, :-1], labels=x[:, :-1])
        # HF shifts labels itself; x[:, :-1] as labels trains next-token within the window
        loss = outp.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or (total and step == total - 1):
            vl = val_loss(model, val, T, dev, 1 << 30) if step % 100 == 0 and step else float("nan")
            rows.append((step, loss.item(), cur, vl))
            if vl < best[0]:  # early stopping: 1M tokens of corpus, small models overfit
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            if step % 100 == 0:
                log(f"   step {step:5d} loss {loss.item():.4f} val {vl:.4f} lr {cur:.2e} {time.time()-t0:.0f}s")
        step += 1
    if best[2] is not None:
        model.load_state_dict(best[2])
        log(f"   best validation loss {best[0]:.4f} at step {best[1]}: that checkpoint is kept")
    train_s = time.time() - t0
    model.eval()
    model.to(torch.float16)
    d = os.path.join(out, name)
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    # validation on the weights as shipped (f16), computed in f32
    model.to(torch.float32)
    vl = val_loss(model, val, T, dev, 1 << 30)
    with open(os.path.join(d, "loss.tsv"), "w") as f:
        f.write("step\ttrain_loss\tlr\tval_loss\n")
        for r in rows:
            f.write(f"{r[0]}\t{r[1]:.4f}\t{r[2]:.3e}\t{r[3]:.4f}\n")
    samples = [sample(model, tok, dev, p) for p in ("In the beginning", "And Jesus said unto them,")]
    samples.append(sample(model, tok, dev, "And it came to pass", temp=0.8, seed=1))
    with open(os.path.join(d, "samples.txt"), "w") as f:
        f.write("\n\n".join(samples) + "\n")
    summ = dict(name=name, arch=type(model).__name__, params=nparam, steps=total, kept_step=best[1], batch=batch, seq=T,
                tokens_seen=total * batch * T, train_seconds=round(train_s, 1),
                final_train_loss=rows[-1][1], val_loss=vl, val_ppl=math.exp(vl),
                train_tokens=len(train), val_tokens=len(val), lr=lr)
    json.dump(summ, open(os.path.join(d, "summary.json"), "w"), indent=1)
    log(f"   {name}: val loss {vl:.4f} ppl {math.exp(vl):.2f}, {train_s:.0f}s; sample: {samples[0][:200]!r}")
    del model, opt
    torch.cuda.empty_cache() if dev == "cuda" else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="tok,dense,draft,moe,hybrid")
    ap.add_argument("--budget", type=float, default=90.0, help="training seconds per model")
    ap.add_argument("--max-steps", type=int, default=1000,
                    help="steps per model (1M tokens of corpus: ~16 epochs at 1000; more overfits)")
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    only = a.only.split(",")
    chaps = chapters(a.corpus)
    log(f"corpus: {len(chaps)} chapters, {sum(map(len, chaps))} chars; device {dev}")
    tdir = os.path.join(a.out, "tokenizer")
    from transformers import PreTrainedTokenizerFast
    if "tok" in only or not os.path.exists(os.path.join(tdir, "tokenizer.json")):
        tok = train_tokenizer(chaps, tdir)
    else:
        tok = PreTrainedTokenizerFast.from_pretrained(tdir)
    train, val = encode_corpus(tok, chaps)
    log(f"tokens: train {len(train)}, val {len(val)} ({sum(map(len, chaps)) / (len(train) + len(val)):.2f} chars/token)")
    specs = model_specs(tok)
    for key in ("dense", "draft", "moe", "hybrid"):
        if key not in only:
            continue
        try:
            train_one(key, specs[key], tok, train, val, a.out, a.budget, dev, max_steps=a.max_steps)
        except Exception as e:  # one architecture failing must not lose the others
            import traceback
            traceback.print_exc()
            log(f"!! {key} failed: {e}")


if __name__ == "__main__":
    main()
