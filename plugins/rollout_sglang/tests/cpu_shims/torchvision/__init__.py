"""Import-only stand-in for ``torchvision`` on CPU test machines (the torchvision workaround).

SGLang 0.5.23 imports ``torchvision.transforms`` at module level
(``sglang.srt.multimodal.internvl_utils``, reached from ``sglang.srt.configs``),
for vision models only. The PyPI torchvision wheels are built against CUDA
torch and break on the CPU torch 2.13 wheel (and with them ``import
transformers``), so the real one must not be importable in the SGLang venv;
``scripts/install_cpu_engine.sh`` removes it. Text-only models never call it;
every call raises and is logged (see ``_rl_import_stub``). transformers still
reports torchvision as unavailable: this folder has no distribution metadata.
"""

from _rl_import_stub import make_stand_in

make_stand_in(globals())
