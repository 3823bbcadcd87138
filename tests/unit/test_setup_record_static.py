"""The release table's ``resolution_record`` (what the startup report reads SGLang's own rewrites from) against each
supported release's wheel source (tools/static_seams.py: ``pip download``, cached; marker ``network``): a release
that defines ``arg_groups/overrides.py::declare_resolution`` and rewrites the draft-token count through it keeps the
record, one that assigns ``server_args.speculative_num_draft_tokens`` in place does not."""

import sys

import pytest

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.doctor import release_table
from support import REPO

sys.path.insert(0, str(REPO / "tools"))
import static_seams  # noqa: E402

HOOK = "sglang/srt/arg_groups/speculative_hook.py"


@pytest.mark.network
@pytest.mark.parametrize("version", releases.supported_versions())
def test_the_resolution_record_fact_matches_the_release_source(version):
    source = static_seams.Source(static_seams.wheel(version))
    overrides = source.zip.read("sglang/srt/arg_groups/overrides.py").decode() \
        if "sglang/srt/arg_groups/overrides.py" in source.names else ""
    hook = source.zip.read(HOOK).decode()
    declares = "def declare_resolution(" in overrides and "speculative_num_draft_tokens=cfg.speculative_num_steps + 1" \
        in hook
    assigns = "server_args.speculative_num_draft_tokens = server_args.speculative_num_steps + 1" in hook
    assert declares != assigns  # exactly one of the two ways
    assert release_table.get(version).resolution_record is declares
