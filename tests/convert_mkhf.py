#!/usr/bin/env python3
"""Writes a tiny Hugging Face checkpoint for `brisk convert` tests (no pip packages).

usage: convert_mkhf.py ARCH OUT_DIR TOKENIZER_DIR [--shards N] [--dtype bf16|f16|f32] [--tied] [--zero-bias]
                      [--mrope A,B,C] [--fp8 e4m3|dequant]

ARCH: llama qwen2 qwen3 qwen3_moe qwen3_5 qwen3_5_moe qwen3_next. Weights are random
(N(0, 1/n_in) matrices, N(0, 0.02) embeddings drawn from a pool of rows so a
150k vocabulary costs little), shapes as transformers names them. The
tokenizer files are copied from TOKENIZER_DIR. --shards N splits the
tensors over N files with model.safetensors.index.json. --zero-bias: qwen2's
q/k/v biases are zero and draw nothing, so qwen2 gets llama's exact weights.
qwen3_next draws qwen3_5_moe's exact weights, then fuses them as Qwen3-Next
stores them (per key head: in_proj_qkvz [q | k | v | z], in_proj_ba [b | a]);
its config has layer_types and no MRoPE. --mrope: qwen3_5*'s mrope_section
(default 2,1,1; 3,3,2 covers all 8 rotary pairs, so text positions rotate as
qwen3_next's plain RoPE does). --fp8 e4m3: every *_proj matrix becomes FP8 as Qwen's
official FP8 checkpoints store it (F8_E4M3 codes, a bf16 "<name>_scale_inv" per
48x48 block, quantization_config in config.json); --fp8 dequant: the same
matrices dequantized, as bf16. Scales have 4 significant bits, so every product
is exact in bf16 and both checkpoints hold the same numbers."""
import json, os, random, shutil, struct, sys

args = sys.argv[1:]
arch, out, tokdir = args[0], args[1], args[2]
shards = int(args[args.index("--shards") + 1]) if "--shards" in args else 1
dtype = args[args.index("--dtype") + 1] if "--dtype" in args else "bf16"
tied = "--tied" in args
zero_bias = "--zero-bias" in args
fp8 = args[args.index("--fp8") + 1] if "--fp8" in args else None
mrope = [int(x) for x in args[args.index("--mrope") + 1].split(",")] if "--mrope" in args else [2, 1, 1]
rng = random.Random(1234)
os.makedirs(out, exist_ok=True)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(tokdir, f), out)

V, D, L, H, KV, HD, FF = 151936, 64, 2, 4, 2, 32, 128
E, EU, FFE, FFS = 8, 2, 64, 64
cfg = {"vocab_size": V, "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H,
       "num_key_value_heads": KV, "intermediate_size": FF, "max_position_embeddings": 4096,
       "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": tied,
       "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16"}
cls = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
       "qwen3_moe": "Qwen3MoeForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM",
       "qwen3_5_moe": "Qwen3_5MoeForCausalLM", "qwen3_next": "Qwen3NextForCausalLM"}[arch]
cfg["architectures"] = [cls]
cfg["model_type"] = arch
if arch not in ("llama", "qwen2"):
    cfg["head_dim"] = HD
else:
    HD = D // H  # llama, qwen2: head_dim implied
moe = arch in ("qwen3_moe", "qwen3_5_moe", "qwen3_next")
if moe:
    cfg.update(num_experts=E, num_experts_per_tok=EU, moe_intermediate_size=FFE, norm_topk_prob=True)
if arch in ("qwen3_5_moe", "qwen3_next"):
    cfg["shared_expert_intermediate_size"] = FFS
hybrid = arch.startswith("qwen3_5") or arch == "qwen3_next"
LK, LV, NK, NV, CK = 16, 16, 2, 4, 4
if hybrid:
    L = 4
    HD = 64
    cfg.update(num_hidden_layers=L, head_dim=HD, linear_key_head_dim=LK, linear_value_head_dim=LV,
               linear_num_key_heads=NK, linear_num_value_heads=NV, linear_conv_kernel_dim=CK,
               full_attention_interval=4,
               rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                "partial_rotary_factor": 0.25, "mrope_section": mrope})
if arch == "qwen3_next":  # as transformers 5 saves it: layer_types, no interval; no MRoPE
    del cfg["full_attention_interval"], cfg["rope_parameters"]["mrope_section"]
    cfg.update(layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)],
               decoder_sparse_step=1, mlp_only_layers=[])

def rand_bf16(n, std):
    """n random bf16 values of magnitude ~std as bytes: random sign and mantissa,
    exponent in [e-1, e+2] around std's (byte-level, so a 150k vocabulary is cheap)."""
    import math
    e = max(2, min(252, int(math.floor(math.log2(std))) + 127 - 1))
    tbl = bytes((b & 0x80) | (((e + (b & 3)) >> 1) & 0x7F) for b in range(256))
    lo_tbl = bytes(((((e + (b & 3)) & 1) << 7) | (b >> 1)) & 0xFF for b in range(256))
    r = rng.randbytes(n)
    out = bytearray(2 * n)
    out[1::2] = r.translate(tbl)
    out[0::2] = r.translate(lo_tbl)  # same draw: the low exponent bit agrees with the high byte
    return bytes(out)

pool = {}
def rows(n_out, n_in, std):
    """n_out rows of n_in values as packed bytes of `dtype` (bf16/f32: random bytes; f16: a pool of rows)."""
    if dtype == "bf16":
        return rand_bf16(n_out * n_in, std)
    if dtype == "f32":
        b = rand_bf16(n_out * n_in, std)
        out = bytearray(4 * n_out * n_in)
        out[2::4] = b[0::2]
        out[3::4] = b[1::2]
        return bytes(out)
    key = (n_in, std)
    if key not in pool:
        pool[key] = [pack([rng.gauss(0, std) for _ in range(n_in)]) for _ in range(min(n_out, 97))]
    p = pool[key]
    return b"".join(p[(i * 31 + n_out) % len(p)] for i in range(n_out))

def pack(vals):
    if dtype == "f32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "f16":
        return struct.pack("<%de" % len(vals), *vals)
    b = struct.pack("<%df" % len(vals), *vals)  # bf16: the top half of each f32, rounded
    u = struct.unpack("<%dI" % len(vals), b)
    return struct.pack("<%dH" % len(vals), *[((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u])

T = {}  # name -> (shape, bytes)
def mat(name, n_out, n_in, std=None):
    T[name] = ([n_out, n_in], rows(n_out, n_in, std if std else n_in ** -0.5))
def vec(name, n, val=None, std=0.02):
    T[name] = ([n], pack([val if val is not None else rng.gauss(0, std) for _ in range(n)]))

mat("model.embed_tokens.weight", V, D, 0.02)
vec("model.norm.weight", D, 0.0 if hybrid else 1.0)
if not tied:
    mat("lm_head.weight", V, D)
for i in range(L):
    p = "model.layers.%d." % i
    vec(p + "input_layernorm.weight", D, 0.0 if hybrid else 1.0)
    vec(p + "post_attention_layernorm.weight", D, 0.05 if hybrid else 1.0)
    if hybrid and (i + 1) % 4 != 0:
        conv = 2 * NK * LK + NV * LV
        mat(p + "linear_attn.in_proj_qkv.weight", conv, D)
        mat(p + "linear_attn.in_proj_z.weight", NV * LV, D)
        mat(p + "linear_attn.in_proj_b.weight", NV, D)
        mat(p + "linear_attn.in_proj_a.weight", NV, D)
        T[p + "linear_attn.conv1d.weight"] = ([conv, 1, CK], pack([rng.gauss(0, 0.5) for _ in range(conv * CK)]))
        vec(p + "linear_attn.A_log", NV, std=0.5)
        vec(p + "linear_attn.dt_bias", NV, std=0.5)
        vec(p + "linear_attn.norm.weight", LV, 1.0)
        mat(p + "linear_attn.out_proj.weight", D, NV * LV)
    else:
        q = H * HD * (2 if hybrid else 1)
        mat(p + "self_attn.q_proj.weight", q, D)
        mat(p + "self_attn.k_proj.weight", KV * HD, D)
        mat(p + "self_attn.v_proj.weight", KV * HD, D)
        mat(p + "self_attn.o_proj.weight", D, H * HD)
        if arch == "qwen2":
            z = 0.0 if zero_bias else None
            vec(p + "self_attn.q_proj.bias", H * HD, z)
            vec(p + "self_attn.k_proj.bias", KV * HD, z)
            vec(p + "self_attn.v_proj.bias", KV * HD, z)
        if arch != "llama" and arch != "qwen2":
            vec(p + "self_attn.q_norm.weight", HD, 0.0 if hybrid else 1.0)
            vec(p + "self_attn.k_norm.weight", HD, 0.0 if hybrid else 1.0)
    if moe:
        mat(p + "mlp.gate.weight", E, D)
        for e in range(E):
            mat(p + "mlp.experts.%d.gate_proj.weight" % e, FFE, D)
            mat(p + "mlp.experts.%d.up_proj.weight" % e, FFE, D)
            mat(p + "mlp.experts.%d.down_proj.weight" % e, D, FFE)
        if arch != "qwen3_moe":
            mat(p + "mlp.shared_expert.gate_proj.weight", FFS, D)
            mat(p + "mlp.shared_expert.up_proj.weight", FFS, D)
            mat(p + "mlp.shared_expert.down_proj.weight", D, FFS)
            mat(p + "mlp.shared_expert_gate.weight", 1, D)
    else:
        mat(p + "mlp.gate_proj.weight", FF, D)
        mat(p + "mlp.up_proj.weight", FF, D)
        mat(p + "mlp.down_proj.weight", D, FF)

def fuse_next(p):
    """Layer p's in_proj_qkv/z/b/a (qwen3_5 layout) as Qwen3-Next's in_proj_qkvz / in_proj_ba."""
    def heads(name, start, size):  # rows [start, start + NK*size) as NK chunks of size rows
        shape, data = T[p + name]
        row = len(data) // shape[0]
        return [data[(start + h * size) * row:(start + (h + 1) * size) * row] for h in range(NK)]
    R = NV // NK
    q = heads("linear_attn.in_proj_qkv.weight", 0, LK)
    k = heads("linear_attn.in_proj_qkv.weight", NK * LK, LK)
    v = heads("linear_attn.in_proj_qkv.weight", 2 * NK * LK, R * LV)
    z = heads("linear_attn.in_proj_z.weight", 0, R * LV)
    b, a = heads("linear_attn.in_proj_b.weight", 0, R), heads("linear_attn.in_proj_a.weight", 0, R)
    for n in ("qkv", "z", "b", "a"):
        del T[p + "linear_attn.in_proj_%s.weight" % n]
    T[p + "linear_attn.in_proj_qkvz.weight"] = ([NK * (2 * LK + 2 * R * LV), D],
                                                b"".join(q[h] + k[h] + v[h] + z[h] for h in range(NK)))
    T[p + "linear_attn.in_proj_ba.weight"] = ([2 * NV, D], b"".join(b[h] + a[h] for h in range(NK)))

if arch == "qwen3_next":
    for i in range(L):
        if (i + 1) % 4 != 0:
            fuse_next("model.layers.%d." % i)

def e4m3(b):
    e, m = (b >> 3) & 15, b & 7
    v = (8 + m) * 2.0 ** (e - 10) if e else m * 2.0 ** -9
    return -v if b & 0x80 else v

BLK = 48  # Qwen uses 128; 48 gives these small matrices several blocks and a partial edge block

def to_fp8(name, std):
    """Matrix name as FP8 codes and block scales (--fp8), drawn from their own generator."""
    import math
    shape = T[name][0]
    r, c = shape
    g = random.Random(name)
    br, bc = (r + BLK - 1) // BLK, (c + BLK - 1) // BLK
    k = math.floor(math.log2(std / 2)) - 3
    scales = [g.randint(8, 15) * 2.0 ** k for _ in range(br * bc)]
    codes = bytearray(g.randrange(256) & 0x87 | g.choice((0, 4, 5, 6, 7, 8, 9)) << 3 for _ in range(r * c))
    if fp8 == "e4m3":
        T[name] = (shape, bytes(codes), "F8_E4M3")
        sb = struct.pack("<%df" % len(scales), *scales)
        T[name + "_scale_inv"] = ([br, bc], b"".join(sb[4 * i + 2:4 * i + 4] for i in range(len(scales))), "BF16")
    else:
        vals = [e4m3(codes[i]) * scales[(i // c) // BLK * bc + (i % c) // BLK] for i in range(r * c)]
        fb = struct.pack("<%df" % len(vals), *vals)  # exact in bf16: the top halves
        T[name] = (shape, b"".join(fb[4 * i + 2:4 * i + 4] for i in range(len(vals))), "BF16")

if fp8:
    assert dtype == "bf16"
    for n in list(T):
        if n.endswith("_proj.weight") and len(T[n][0]) == 2:
            to_fp8(n, T[n][0][1] ** -0.5)
    if fp8 == "e4m3":
        cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [BLK, BLK]}

def write_st(path, names):
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    st = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]
    for n in names:
        shape, data = T[n][:2]
        hdr[n] = {"dtype": T[n][2] if len(T[n]) > 2 else st, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)

names = list(T)
if shards == 1:
    write_st(os.path.join(out, "model.safetensors"), names)
else:
    wm = {}
    for s in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = names[s::shards]
        write_st(os.path.join(out, fn), part)
        wm.update({n: fn for n in part})
    json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
