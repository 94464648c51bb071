#!/usr/bin/env python3
"""gen.py OLD_COMMIT OUT.cu — writes the equivalence harness of cuda_matmul.cu's ladder (see
ladder_equiv.sh): the dispatch code of OLD_COMMIT (cuda_gemv.cu's cuda_matmul, cuda_matmul_add,
cuda_matmul_swiglu and their helpers) and of the work tree (cuda_matmul.cu), both over the work
tree's predicates and over recording mocks of the kernels, in one host program."""
import re, subprocess, sys

old_commit, out = sys.argv[1], sys.argv[2]
D = 'src/backend/cuda/'


def show(path, commit=None):
    if commit:
        return subprocess.check_output(['git', 'show', f'{commit}:{path}'], text=True)
    return open(path).read()


def func(src, head):
    """The definition that starts with the line beginning `head`, to its closing brace at column 0
    (or the same line for a one-line body)."""
    lines = src.split('\n')
    for i, l in enumerate(lines):
        if l.startswith(head):
            if l.rstrip().endswith('}'):
                return l + '\n'
            for j in range(i + 1, len(lines)):
                if lines[j] == '}':
                    return '\n'.join(lines[i:j + 1]) + '\n'
    sys.exit(f'gen.py: no definition starting {head!r}')


new_preds = [
    ('cuda_mmq.cu', ['bool cuda_mmq_use(', 'bool cuda_mmq_should_use(', 'bool cuda_mmq_glu_should_use(']),
    ('cuda_mmqh.cu', ['bool cuda_mmqh_supported(', 'bool cuda_mmqh_use(', 'bool cuda_mmqh_should_use(',
                      'bool cuda_mmqh_glu_should_use(']),
    ('cuda_mmvq.cu', ['bool cuda_mmvq_supported(', 'bool cuda_mmvq_dec_supported(', 'bool cuda_mmvq_use(',
                      'bool cuda_mmvq_should_use(', 'bool cuda_mmvq_multi_should_use(',
                      'bool cuda_mmvq_glu_should_use(']),
    ('cuda_mma.cu', ['bool cuda_mma_supported(', 'bool cuda_mma_should_use(']),
    ('cuda_blas.cu', ['bool cuda_blas_should_use(']),
    ('cuda_gemv.cu', ['bool cuda_gemv_splitk_should_use(', 'bool cuda_mm_tiled_should_use(']),
    ('cuda_mmvf.cu', ['bool cuda_mmvf_should_use(', 'static mmvs_mats mmvs_run(', 'int cuda_mmvf_run(']),
]
preds = ''
for f, heads in new_preds:
    src = show(D + f)
    preds += f'/* ---- {f} (work tree) ---- */\n' + ''.join(func(src, h) for h in heads)

# The old ladder: cuda_gemv.cu from mmvs_run to the end, and the one predicate whose text changed.
og = show(D + 'cuda_gemv.cu', old_commit)
old = og[og.index('/* The first run of w[0..n_w)'):]
old_pred = func(show(D + 'cuda_mmq.cu', old_commit), 'bool cuda_mmq_use(') + \
    func(og, 'bool cuda_gemv_splitk_use(')
old_pred = old_pred.replace('bool cuda_', 'static bool cuda_')

new = show(D + 'cuda_matmul.cu')
new = new[new.index('static void float_matmul('):]

tmpl = open('dev/ladder/harness.cu.in').read()
tmpl = tmpl.replace('@PREDS@', preds).replace('@OLD_PREDS@', old_pred).replace('@OLD@', old).replace('@NEW@', new)
open(out, 'w').write(tmpl)
