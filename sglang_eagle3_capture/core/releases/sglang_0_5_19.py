"""SGLang 0.5.19 (wheel built 2026-09-04): as 0.5.20 for the plugin's seams (read from the wheel);
``_resolve_eagle_aux_hidden_state`` has no ``model_config`` parameter, which the plugin's resolution seam
(``ModelRunner.init_spec_aux_hidden_state``) does not depend on."""

from dataclasses import replace

from . import sglang_0_5_20

RELEASE = replace(sglang_0_5_20.RELEASE, version="0.5.19", built="2026-09-04")
