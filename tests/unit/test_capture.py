"""core/capture.py without SGLang: layer ids -> loop indices, fc-order permutation, the pipeline-stage rule
(policy.check_stage), the FcFeed and its last-layer capture."""

from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core.capture import CaptureError, FcFeed, plan_capture, to_fc_order
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.layer_ids import hidden_state_index
from sglang_eagle3_capture.core.policy import check_stage

WHERE = "draft/eagle3_manifest.json: field 'layer_ids'"
DEEPSEEK = {"model_name": "DeepseekV2Model"}  # a packing family's decoder stack


def test_seed_case_is_ascending_embedding_first():
    p = plan_capture([-1, 2, 30], 61, where=WHERE)
    assert p.layer_ids == (-1, 2, 30)
    assert p.loop_indices == tuple(hidden_state_index(i) for i in (-1, 2, 30)) == (0, 3, 31)
    assert p.chunk_order == (0, 1, 2) and p.is_identity


@pytest.mark.parametrize("ids", [[1, 2, 3], [-1], [0, 59], [59, -1]])
def test_no_heuristic_decides_the_offset(ids):
    # SGLang 0.5.23 adds 1 only when ids[0] == 1; the plan always translates through hidden_state_index.
    p = plan_capture(ids, 61, where=WHERE)
    assert sorted(p.loop_indices) == sorted(hidden_state_index(i) for i in ids)


def test_non_ascending_ids_get_a_fixed_permutation():
    p = plan_capture([30, -1, 2], 61, where=WHERE)
    assert p.loop_indices == (0, 3, 31)  # the packer writes ascending loop order
    assert p.chunk_order == (2, 0, 1) and not p.is_identity  # fc chunk j <- packer chunk chunk_order[j]


def test_to_fc_order_routes_chunks_exactly():
    h = 5
    chunks = [torch.randn(7, h) for _ in range(3)]  # packer order: loop 0, 3, 31
    packed = torch.cat(chunks, dim=-1)
    p = plan_capture([30, -1, 2], 61, where=WHERE)
    out = to_fc_order(packed, p)
    assert torch.equal(out, torch.cat([chunks[2], chunks[0], chunks[1]], dim=-1))
    assert out.data_ptr() != packed.data_ptr()
    ident = plan_capture([-1, 2, 30], 61, where=WHERE)
    assert to_fc_order(packed, ident) is packed


@pytest.mark.parametrize("ids, loop, order", [([-1, 2, 60], (0, 3), (0, 1, 2)), ([60, -1, 2], (0, 3), (2, 0, 1)),
                                               ([60], (), (0,))])
def test_last_layer_output_is_taken_after_the_loop(ids, loop, order):
    # Layer id N-1 is HF index N: the loop (indices 0..N-1) never reaches it; the plan takes it at the final
    # norm and appends it after the packed chunks, so the combined order stays ascending.
    p = plan_capture(ids, 61, where=WHERE)
    assert (p.loop_indices, p.chunk_order, p.captures_last_layer) == (loop, order, True) and not p.is_identity
    assert hidden_state_index(60) not in p.loop_indices


def test_to_fc_order_appends_the_last_layer_output_in_place_of_its_id():
    h = 4
    chunks = [torch.randn(3, h) for _ in range(2)]  # packer order: loop 0, 3
    last = torch.randn(3, h)
    packed = torch.cat(chunks, dim=-1)
    out = to_fc_order(packed, plan_capture([60, -1, 2], 61, where=WHERE), last)
    assert torch.equal(out, torch.cat([last, chunks[0], chunks[1]], dim=-1))
    out = to_fc_order(packed, plan_capture([-1, 2, 60], 61, where=WHERE), last)
    assert torch.equal(out, torch.cat([chunks[0], chunks[1], last], dim=-1))
    alone = to_fc_order(None, plan_capture([60], 61, where=WHERE), last)
    assert torch.equal(alone, last) and alone.data_ptr() != last.data_ptr()  # a copy: last borrows the residual


def test_stage_check_accepts_the_last_layer_on_the_last_stage():
    check_stage((59, 60), 61, 30, 61, pp_size=2, file="m.json", field="layer_ids")


@pytest.mark.parametrize("ids, fragment", [([-2, 3], "outside [-1, 60]"), ([0, 61], "outside [-1, 60]"),
                                           ([3, 3], "duplicate")])
def test_out_of_range_ids_are_refused(ids, fragment):
    with pytest.raises(InputError) as e:
        plan_capture(ids, 61, where=WHERE)
    assert WHERE in str(e.value) and fragment in str(e.value)


def test_stage_check_names_pp_size_and_fix():
    ids = (-1, 2, 30)
    check_stage(ids, 61, 0, 61, pp_size=1, file="m.json", field="layer_ids")
    with pytest.raises(DeploymentError) as e:
        check_stage(ids, 61, 30, 61, pp_size=2, file="m.json", field="layer_ids")
    assert (e.value.file, e.value.field) == ("m.json", "layer_ids")
    assert "layer ids [-1, 2]" in e.value.problem and "--pp-size 2" in e.value.problem
    assert "--pp-size 1" in e.value.fix and "decoder layer 0" in e.value.fix


class _PairNorm(torch.nn.Module):
    """Stands in for SGLang's RMSNorm(x, residual) -> (normed, x + residual)."""

    def forward(self, x, residual=None):
        if residual is None:
            return x * 2
        return (x + residual) * 2, x + residual


def _model(layers, norm=None):
    return SimpleNamespace(layers_to_capture=layers, norm=norm or _PairNorm())


def test_feed_puts_packed_chunks_in_fc_order():
    p = plan_capture([3, -1], 6, where=WHERE)
    layers = list(p.loop_indices)
    hidden, aux = torch.zeros(2, 3), torch.arange(12.0).reshape(2, 6)
    out = FcFeed(p, layers, **DEEPSEEK)(_model(layers), (hidden, aux), None, None, None)
    assert out[0] is hidden and torch.equal(out[1], torch.cat([aux[:, 3:], aux[:, :3]], dim=-1))


def test_feed_says_which_layer_ids_it_feeds_while_its_capture_list_is_in_place():
    p = plan_capture([5, -1, 2], 6, where=WHERE)  # the last layer (5) is taken outside the loop
    layers = list(p.loop_indices)
    assert FcFeed(p, layers, None, 6, **DEEPSEEK).fed_layer_ids(layers) == (5, -1, 2)
    assert FcFeed(p, layers, None, 6, **DEEPSEEK).fed_layer_ids(list(layers)) is None  # replaced behind the feed's back
    stock = [0, 2, 4]  # stock wiring with a dump: loop indices, fed in ascending order
    assert FcFeed(None, stock, None, 6, **DEEPSEEK).fed_layer_ids(stock) == (-1, 1, 3)


def test_identity_feed_returns_the_packed_tensor_itself():
    p = plan_capture([-1, 3], 6, where=WHERE)
    layers = list(p.loop_indices)
    hidden, aux = torch.zeros(2, 3), torch.randn(2, 6)
    out = FcFeed(p, layers, **DEEPSEEK)(_model(layers), (hidden, aux), None, None, None)
    assert out[0] is hidden and out[1] is aux


def test_feed_takes_the_last_layer_output_from_the_final_norm():
    p = plan_capture([5, -1], 6, where=WHERE)  # 6 layers: id 5 is the last layer's output
    layers = list(p.loop_indices)
    model = _model(layers)
    feed = FcFeed(p, layers, **DEEPSEEK)
    feed.attach(model)
    x, residual, packed = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    hidden, _ = model.norm(x, residual)
    out = feed(model, (hidden, packed), None, None, None)
    assert torch.equal(out[1], torch.cat([x + residual, packed], dim=-1))
    with pytest.raises(CaptureError) as e:
        feed(model, (hidden, packed), None, None, None)  # taken once per forward: the norm did not run again
    assert e.value.file == WHERE and "DeepseekV2Model's final norm" in e.value.problem and e.value.fix
    model.norm(x, residual)
    with pytest.raises(CaptureError) as e:
        feed(model, (hidden, torch.cat([packed, packed])), None, None, None)  # a layout mixing token sets
    assert "loop captures with 4 rows" in e.value.problem
    empty = feed(model, (hidden[:0], packed[:0]), None, None, None)  # idle batch: no final norm, no rows
    assert empty[1].shape == (0, 6)
    feed.detach()
    model.norm(x, residual)
    with pytest.raises(RuntimeError):  # a CaptureError is still a RuntimeError
        feed(model, (hidden, packed), None, None, None)


def test_feed_with_only_the_last_layer_builds_the_fc_input_from_the_norm():
    p = plan_capture([5], 6, where=WHERE)
    model = _model([])
    feed = FcFeed(p, model.layers_to_capture, **DEEPSEEK)
    feed.attach(model)
    x, residual = torch.randn(2, 3), torch.randn(2, 3)
    hidden, _ = model.norm(x, residual)
    out = feed(model, hidden, None, None, None)  # the packer captured nothing: the model returned a plain tensor
    assert out[0] is hidden and torch.equal(out[1], x + residual)


def test_last_layer_hook_traces_under_torch_compile(monkeypatch):
    """--enable-torch-compile: dynamo must trace the norm hook's write and the feed's read as one graph
    (fullgraph=True fails on a graph break) and replay them with each call's tensors, not the first call's."""
    import torch._dynamo

    monkeypatch.delenv("TORCHDYNAMO_DISABLE", raising=False)  # the CPU harness disables dynamo for SGLang
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = _PairNorm()
            self.layers_to_capture = [0]

        def forward(self, x, residual):
            return self.norm(x, residual)[0], x * 3  # (normed, packer output for loop index 0)

    model = Model()
    feed = FcFeed(plan_capture([5, -1], 6, where=WHERE), model.layers_to_capture, **DEEPSEEK)
    feed.attach(model)
    compiled = torch.compile(lambda x, r: feed(model, model(x, r), None, None, None), backend="eager", fullgraph=True)
    for _ in range(3):
        x, residual = torch.randn(4, 3), torch.randn(4, 3)
        hidden, aux = compiled(x, residual)
        assert torch.equal(aux, torch.cat([x + residual, x * 3], dim=-1))
    assert counters["stats"]["unique_graphs"] == 1  # dynamo really compiled it (once, then reused)
    torch._dynamo.reset()


@pytest.mark.parametrize("case", ["decoder ids", "wrapper embeds", "served embeds"])
def test_dump_gets_the_batch_token_ids_when_a_wrapper_hands_its_decoder_embeddings(tmp_path, case):
    # Kimi-K2.5's forward (general_mm_embed_routine) calls its language model with input_ids=None and the embeddings
    # it computed from forward_batch.input_ids: the dump takes the ids from the batch, so `compare` can align the rows.
    # A request that served its own embeddings (forward_batch.input_embeds) has no ids that made them: none dumped.
    from safetensors.torch import load_file

    from sglang_eagle3_capture.observe.dump import CaptureDump

    p = plan_capture([-1, 3], 6, where=WHERE)
    layers = list(p.loop_indices)
    ids, positions = torch.tensor([5, 6, 7]), torch.arange(3)
    batch = SimpleNamespace(input_ids=ids, input_embeds=torch.zeros(3, 4) if case == "served embeds" else None,
                            forward_mode=SimpleNamespace(name="EXTEND"))
    dump = CaptureDump(tmp_path, metadata={"tp_rank": 0}, max_batches=1)
    FcFeed(p, layers, dump, 6, **DEEPSEEK)(_model(layers), (torch.zeros(3, 2), torch.randn(3, 4)),
                                           ids.clone() if case == "decoder ids" else None, positions, batch)
    (written,) = [load_file(str(f)) for f in tmp_path.glob("*.safetensors")]
    if case == "served embeds":
        assert "input_ids" not in written
    else:
        assert torch.equal(written["input_ids"], ids) and torch.equal(written["positions"], positions)
