"""Import-only stand-in for ``sgl_kernel`` (the ``sglang-kernel`` wheel) on CPU test machines.

SGLang 0.5.23 imports ``sgl_kernel`` at module level in several places, but
PyPI has only CUDA builds of it (``sglang-kernel``, ~GBs of CUDA wheels). On a
CPU without AMX SGLang's CPU path falls back to torch-native code and calls
nothing of it; ``sglang.srt.utils.common._is_intel_amx_backend_available``
looks for ``torch.ops.sgl_kernel.convert_weight_packed``, which this stand-in
does not register, so AMX CPUs take the fallback too. Every call raises and is
logged (see ``_rl_import_stub``).
"""

from _rl_import_stub import make_stand_in

make_stand_in(globals())
