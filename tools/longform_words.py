"""Word timestamps and speed on the long-form paragraphs (12-68 s of human reading), and memory under them.

    python tools/longform_words.py ../shared/data/librispeech_pc_paragraphs.tsv qwen3-tts-tiny

For the shortest, the median and the longest paragraph, at speed 1 and 1.5: one request each, spoken to the
paragraph's human reading length (`ignore_eos`), reporting how many words were named, whether each came once and
in order, and where the last one ends. Then 30 warm-up and 150 s of speed + timestamps requests, and each
process's private memory before and after.
"""
import csv, statistics, sys, time
from server.compare import free_ports
from server.serve import ServeConfig, Server
from clients.stream import synthesize
from server.triton_launch import Ports
from server.procstats import snapshot

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
rows = sorted(rows, key=lambda r: float(r["duration_s"]))
picks = [rows[0], rows[len(rows) // 2], rows[-1]]
h, g, m = free_ports(3)
model = sys.argv[2]
with Server(ServeConfig(model=model, ports=Ports(http=h, grpc=g, metrics=m)), log_path="/tmp/longform.log") as s:
    for r in picks:
        text = r["text"]
        for speed in (1.0, 1.5):
            res = synthesize(s.grpc_url, text, seed=1, timestamps="word", speed=speed, max_audio_seconds=float(r["duration_s"]), ignore_eos=True)
            words = res.words
            ok = [w["word"] for w in words] == text.split()[:len(words)]
            ordered = all(a["end"] <= b["start"] + 0.002 for a, b in zip(words, words[1:]))
            print(f"{model} {r['utterance_id']} ref {r['duration_s']} s, {len(text.split())} words, speed {speed}: "
                  f"audio {res.audio_seconds:.2f} s, {len(words)} words named, once in order {ok and ordered}, "
                  f"last word end {words[-1]['end']:.2f} s, chunks {len(res.chunks)}", flush=True)
    pid = s.process.process.pid
    for n in range(30):
        synthesize(s.grpc_url, picks[0]["text"], seed=n, timestamps="word", speed=[0.5, 1.5, 2.0][n % 3], max_audio_seconds=6, ignore_eos=True)
    before = snapshot(pid)
    t = time.time()
    n = 0
    while time.time() - t < 150:
        synthesize(s.grpc_url, picks[0]["text"], seed=n, timestamps="word", speed=[0.5, 1.5, 2.0][n % 3], max_audio_seconds=6, ignore_eos=True)
        n += 1
    after = snapshot(pid)
    for name in sorted(after):
        print(f"{name}: private {before[name].private_kb/1024:.1f} -> {after[name].private_kb/1024:.1f} MB over {n} speed+timestamps requests")
