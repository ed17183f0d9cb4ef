"""The LM profile's pure parts: kernel classes by name, their sums, the frame's bandwidth floor, the choice
between graph replays and eager twins, the report's tables, and the CLI path on the CPU."""
from __future__ import annotations

import json
import math

import pytest
import torch

from backend_python.engine.config import EngineConfig
from backend_python.models.graphs.buffers import batch_buckets
from backend_python.models.qwen3_tts import preset_config
from backend_python.models.qwen3_tts.talker import Talker
from backend_python.models.slots import DEFAULT_GRAPH_BATCH_SIZES
from server.microbench import lm, lm_profile
from server.microbench.frame_floor import FrameBytes, floor_report, frame_bytes, predictor_keys_per_frame
from server.microbench.kernel_classes import Kernel, KernelClass, classify, summarize
from server.microbench.profile_report import frame_table, halves_table, top_tables

C = KernelClass
NAMES = [  # kernel names as H100/H200 traces print them (shortened where templates run long)
    ("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", C.GEMM),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", C.GEMM),
    ("void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false, "
     "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, float> >(...)", C.GEMM),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false>(...)",
     C.GEMM),  # a reduction by name, but its GEMM's
    ("triton_tem_fused_mm_0", C.GEMM),
    ("void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
     "cutlass::bfloat16_t>, false, true, false>(Flash_fwd_params)", C.ATTENTION),  # cutlass, yet attention
    ("void pytorch_flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, 4, 1>(...)",
     C.ATTENTION),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", C.ATTENTION),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, Epilogue>(...)", C.SAMPLING),
    ("void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long, at::native::GTOp<float, true>>(...)",
     C.SAMPLING),
    ("void at::native::(anonymous namespace)::fillSliceWithIndex_kernel<long, unsigned int, 2>(...)",
     C.SAMPLING),  # the sort's indices
    ("void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel<Policy, true, float, long, int>(...)", C.SAMPLING),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned "
     "int, long, 4, 4> >(...)", C.SAMPLING),  # a reduce_kernel, but an argmax
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
     "exponential_kernel>(...)", C.SAMPLING),  # an elementwise kernel, but a random draw
    ("triton_per_fused__softmax_argmax_div_masked_fill_sort_0", C.SAMPLING),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", C.NORM),  # a reduction with a cast, but a norm
    ("triton_per_fused__to_copy_add_cat_mean_mul_neg_pow_rsqrt_1", C.NORM),  # q/k norm with RoPE fused in
    ("void at::native::vectorized_elementwise_kernel<4, at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda()#2}, std::array<char*, 2ul> >(...)", C.NORM),
    ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<index_put_kernel_impl>>(...)",
     C.COPY),  # the KV write
    ("triton_poi_fused_index_put_2", C.COPY),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda()#3}>(...)", C.COPY),
    ("void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long, unsigned int, 2>(...)",
     C.COPY),  # an embedding lookup
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<...>(...)", C.COPY),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, std::array<char*, 1> >",
     C.COPY),
    ("Memcpy HtoD (Pinned -> Device)", C.COPY),
    ("Memset (Device)", C.COPY),
    ("triton_poi_fused__to_copy_add_mul_silu_3", C.ELEMENTWISE),  # `_to_copy` is a cast, not a copy
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, ...>",
     C.ELEMENTWISE),
    ("void at::native::roll_cuda_kernel<c10::BFloat16>(...)", C.ELEMENTWISE),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, "
     "unsigned int, float, 4> >(...)", C.REDUCTION),
    ("triton_red_fused_sum_0", C.REDUCTION),
    ("_fused_linear_kernel", C.GEMM),  # the fused frame's matmuls (kernels/fused_linear.py)
    ("_split_k_epilogue_kernel", C.GEMM),  # their split-K sums and epilogue
    ("_rope_write_kernel", C.ATTENTION),  # the talker's q/k norm + RoPE + KV write
    ("_sample_kernel", C.SAMPLING),  # the fused sampler, its noise drawn inside
    ("my_custom_kernel", C.OTHER),
]


@pytest.mark.parametrize("name, expected", NAMES, ids=[f"{i}-{cls.value}" for i, (_, cls) in enumerate(NAMES)])
def test_kernels_are_classed_by_name(name, expected):
    assert classify(name) is expected


def test_every_class_has_a_named_example():
    assert {cls for _, cls in NAMES} == set(KernelClass)


def test_a_summary_counts_and_times_each_class_and_lists_the_longest_names():
    kernels = [Kernel("nvjet_gemm_a", 0.0, 10.0), Kernel("nvjet_gemm_a", 12.0, 22.0),
               Kernel("triton_poi_fused_add_0", 22.0, 23.0), Kernel("Memcpy DtoH", 30.0, 34.0)]
    summary = summarize(kernels, num_top=2)
    assert (summary.count, summary.busy_ms, summary.span_ms) == (4, pytest.approx(0.025), pytest.approx(0.034))
    assert (summary.classes[C.GEMM].count, summary.classes[C.GEMM].ms) == (2, pytest.approx(0.020))
    assert summary.classes[C.COPY].count == 1 and summary.classes[C.ELEMENTWISE].count == 1
    assert summary.classes[C.ATTENTION].count == 0  # every class is listed
    assert [(k.name, k.count, k.kernel_class) for k in summary.top] == [("nvjet_gemm_a", 2, C.GEMM),
                                                                         ("Memcpy DtoH", 1, C.COPY)]
    assert summarize([]).count == 0 and summarize([]).span_ms == 0.0


def test_the_floor_adds_weights_once_and_rows_per_batch():
    frame = FrameBytes(talker_weights=100, predictor_step_weights=10, predictor_heads=6, num_predictor_steps=3,
                       talker_kv_per_position=2, predictor_kv_per_row=5, embedding_rows_per_row=4, noise_per_row=1)
    assert frame.weights() == 100 + 3 * 10 + 6
    assert frame.weights(is_predictor_cached=True) == 100 + 10 + 6
    assert frame.per_row(context=7) == 7 * 2 + 5 + 4 + 1
    assert frame.total(batch=2, context=7) == 136 + 2 * 24
    report = floor_report(frame, batch=2, context=7, bandwidth=184e3)  # 184 bytes at 184 kB/s: 1 ms
    assert report["floor_ms"] == pytest.approx(1.0)
    assert report["floor_ms_predictor_cached"] == pytest.approx((116 + 48) / 184e3 * 1e3)
    assert (report["talker_kv_bytes"], report["predictor_weight_bytes"]) == (2 * 7 * 2, 36)


def test_predictor_steps_attend_over_their_frame_so_far():
    assert predictor_keys_per_frame(3) == 2 + 3  # step 0: positions 0, 1; step 1: 0 .. 2
    assert predictor_keys_per_frame(16) == sum(range(2, 17)) == 135  # 2 + 3 + ... + 16


def _talker(preset: str) -> tuple[Talker, object]:
    config = preset_config(preset)
    with torch.device("meta"):
        return Talker(config.talker).to(torch.bfloat16), config.talker


def test_frame_bytes_match_the_configs_shapes():
    talker, cfg = _talker("qwen3-tts-tiny")
    h, i, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    per_layer = h * (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd + cfg.num_attention_heads * hd * h \
        + 3 * h * i + 2 * h + 2 * hd  # q/k/v, o, gate/up/down, two norms, q/k norms
    frame = frame_bytes(talker, noise_width=100)
    assert frame.talker_weights == 2 * (cfg.num_hidden_layers * per_layer + h + cfg.vocab_size * h)
    p = cfg.code_predictor
    assert frame.predictor_heads == 2 * (cfg.num_code_groups - 1) * p.vocab_size * p.hidden_size
    assert frame.talker_kv_per_position == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * hd * 2
    keys = sum(range(2, cfg.num_code_groups + 1))  # predictor step i reads positions 0 .. i + 1
    assert frame.predictor_kv_per_row == keys * 2 * p.num_hidden_layers * p.num_key_value_heads * p.head_dim * 2
    assert (frame.noise_per_row, frame.embedding_rows_per_row) == (400, cfg.num_code_groups * h * 2)


def test_the_1_7b_frame_reads_what_the_benchmarks_say():
    talker, _ = _talker("qwen3-tts-1.7b")
    frame = frame_bytes(talker, noise_width=3072 + 15 * 2048)
    assert round(frame.talker_weights / 1e9, 2) == 2.83  # BENCHMARKS: "the 2.83 GB of weights a talker step reads"
    assert round(frame.predictor_step_weights / 1e9, 3) == 0.162  # 5 layers of 1024 + the 2048 -> 1024 projection
    assert floor_report(frame, batch=1, context=256)["floor_ms"] == pytest.approx(1.244, abs=1e-3)


def test_batch_sizes_outside_the_engines_buckets_are_named():
    engine = batch_buckets(DEFAULT_GRAPH_BATCH_SIZES, EngineConfig().max_batch)
    assert lm.bucket_notes([1, 32, 128], engine) == []  # the sizes are all buckets the engine runs
    notes = lm.bucket_notes([100, 256], (1, 8, 128))
    assert "padded to the engine's bucket 128" in notes[0] and "past the engine's largest bucket 128" in notes[1]


class FakeGraphs:
    """run(bucket, graphed) returns what it ran, so a fake trace can answer with kernels for it."""

    def run_predictor(self, bucket, graphed):
        return "predictor", graphed

    def run_talker(self, bucket, graphed):
        return "talker", graphed


def _profile(monkeypatch, counts: dict, can_graph: bool = True) -> tuple[lm_profile.BucketProfile, list]:
    steps = []

    def trace(run):
        ran = run()
        return [Kernel(f"k{i}", i, i + 1.0) for i in range(counts[ran])]

    def decode(graphed):
        steps.append(graphed)
        return "step", graphed

    monkeypatch.setattr(lm_profile, "trace", trace)
    return lm_profile.profile_bucket(FakeGraphs(), 4, decode, can_graph, num_top=3), steps


EAGER = {("predictor", False): 100, ("talker", False): 40}


def test_the_profile_reads_the_graph_replays_and_counts_what_runs_outside(monkeypatch):
    counts = {**EAGER, ("predictor", True): 100, ("talker", True): 40, ("step", True): 145}
    result, steps = _profile(monkeypatch, counts)
    assert (result.source, steps) == ("graph replays", [True])
    assert (result.halves["predictor"].count, result.num_outside_graphs) == (100, 5)
    assert result.eager_counts == {"predictor": 100, "talker": 40}


def test_replays_the_trace_cannot_see_into_fall_back_to_the_eager_twins(monkeypatch):
    counts = {**EAGER, ("predictor", True): 0, ("talker", True): 0, ("step", False): 150}
    result, steps = _profile(monkeypatch, counts)
    assert (result.source, steps, result.num_outside_graphs) == ("eager twins", [False], 10)
    result, steps = _profile(monkeypatch, {**EAGER, ("step", False): 140}, can_graph=False)  # no replay at all
    assert (result.source, steps, result.to_dict()["outside_graphs"]) == ("eager twins", [False], 0)


def _row(compiled: bool, profile: dict | None) -> dict:
    return {"compiled": compiled, "batch": 1, "graphs_ms": 6.9, "predictor_ms": 4.7, "talker_ms": 1.8,
            "context": 256, "frame_floor_ms": 1.244, "frame_floor_cached_ms": 0.718, "profile": profile}


def test_the_report_tables_show_kernels_classes_floor_and_the_longest_kernels(monkeypatch):
    counts = {**EAGER, ("predictor", True): 100, ("talker", True): 40, ("step", True): 145}
    profile = _profile(monkeypatch, counts)[0].to_dict()
    table = frame_table([_row(True, profile), _row(False, None) | {"graphs_ms": math.nan}])
    assert "| compiled | 1 | 6.90 | 4.70 / 1.80 | 145 | 100 + 40 + 5 | 0.14 |" in table
    assert "| 256 | 1.244 / 0.718 | 5.55 |" in table  # 6.9 ms against a 1.244 ms floor
    assert "| uncompiled | 1 | - | 4.70 / 1.80 | - |" in table
    halves = halves_table([_row(True, profile)])
    assert "| compiled | 1 | predictor | 100 | 4.70 | 0.10 | 4.60 | 47.0 | other 0.10 ms |" in halves
    tops = top_tables([_row(True, profile)], batch=1)
    assert "compiled, batch 1, predictor (graph replays): 100 kernels" in tops
    assert "| 0.001 | 1 | other | `k0` |" in tops


def test_the_cli_runs_on_the_cpu_and_writes_the_floor(tmp_path, capsys):
    out = tmp_path / "lm.json"
    with torch.no_grad():
        lm.main(["--model", "qwen3-tts-tiny", "--device", "cpu", "--batch-sizes", "1", "2", "--frames", "1",
                 "--eager-frames", "1", "--context", "12", "--profile", "--json", str(out)])
    text = capsys.readouterr().out
    assert "no kernel profile without CUDA (skipped)" in text
    rows = json.loads(out.read_text())
    assert [(r["batch"], r["compiled"], r["profile"]) for r in rows] == [(1, False, None), (2, False, None)]
    assert rows[0]["context"] >= 12 and rows[0]["frame_floor_ms"] > 0 and math.isnan(rows[0]["graphs_ms"])


def test_too_short_a_cache_is_refused_before_anything_runs():
    args = lm.parse_args(["--batch-sizes", "1", "32", "--context", "1000", "--max-seq-len", "1024"])
    with pytest.raises(SystemExit, match="too short"):
        lm.check_positions(args, num_prompt_tokens=40)
