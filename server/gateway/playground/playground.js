// The VoxLane playground: speak through the gateway's /v1/audio/speech and play each chunk as it arrives.
// Playback asks for 16-bit PCM as server-sent events (one `speech.audio.delta` per chunk, with its lane) and
// queues every chunk on the Web Audio clock right after the one before. "Download" asks the gateway again
// with the same seed in the chosen format. `window.voxlane` exposes what the page saw, for tests.
"use strict";

const $ = (id) => document.getElementById(id);
const state = window.voxlane = { chunks: [], scheduledSamples: 0, done: false, error: null, sampleRate: null };
let audioContext = null;
let controller = null;
let nextStart = 0;  // AudioContext time the next chunk starts at
let pcmParts = [];  // Int16Array per chunk, for a WAV download without asking again

function requestBody(format, streamFormat) {
  const body = {
    model: $("model").value, input: $("text").value, voice: $("voice").value || "alloy",
    response_format: format, stream_format: streamFormat,
    seed: Number($("seed").value), max_audio_seconds: Number($("max-seconds").value),
  };
  if ($("rate").value) body.sample_rate = Number($("rate").value);
  if ($("ignore-eos").checked) body.ignore_eos = true;
  return body;
}

// a gateway started with API keys answers 401 without one: the key field sends it, as OpenAI's SDKs do
function authHeaders() {
  const key = $("api-key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function post(body, signal) {
  return fetch("/v1/audio/speech", {
    method: "POST", headers: { "Content-Type": "application/json", ...authHeaders() }, body: JSON.stringify(body), signal,
  });
}

function showError(message) {
  state.error = message;
  $("error").textContent = message;
  $("error").hidden = false;
  $("status").textContent = "error";
}

async function errorMessage(response) {
  try {
    const payload = await response.json();
    return `${response.status}: ${payload.error ? payload.error.message : JSON.stringify(payload)}`;
  } catch (e) {
    return `${response.status} ${response.statusText}`;
  }
}

function resetRun() {
  Object.assign(state, { chunks: [], scheduledSamples: 0, done: false, error: null, sampleRate: null });
  pcmParts = [];
  $("chunks").tBodies[0].innerHTML = "";
  $("summary").textContent = "";
  $("error").hidden = true;
}

async function speak() {
  resetRun();
  audioContext = audioContext || new AudioContext();
  await audioContext.resume();
  controller = new AbortController();
  setRunning(true);
  const sent = performance.now();
  try {
    const response = await post(requestBody("pcm", "sse"), controller.signal);
    if (!response.ok) return showError(await errorMessage(response));
    state.sampleRate = Number(response.headers.get("X-Sample-Rate"));
    nextStart = audioContext.currentTime + 0.05;
    await readEvents(response.body.getReader(), (event) => onEvent(event, sent));
  } catch (e) {
    if (e.name !== "AbortError") showError(String(e));
  } finally {
    setRunning(false);
  }
}

async function readEvents(reader, onEvent) {
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const line = buffer.slice(0, end).trim();
      buffer = buffer.slice(end + 2);
      if (line.startsWith("data: ")) onEvent(JSON.parse(line.slice(6)));
    }
  }
}

function onEvent(event, sent) {
  if (event.type === "speech.audio.delta") return playChunk(event, performance.now() - sent);
  if (event.type === "speech.audio.done") {
    state.done = true;
    $("status").textContent = `done: ${state.chunks.length} chunks`;
    $("download-button").disabled = false;
    return;
  }
  if (event.type === "error") showError(event.message || JSON.stringify(event));
}

function playChunk(event, arrivedMs) {
  const bytes = Uint8Array.from(atob(event.audio), (c) => c.charCodeAt(0));
  const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
  pcmParts.push(pcm);
  const buffer = audioContext.createBuffer(1, Math.max(pcm.length, 1), state.sampleRate);
  const samples = buffer.getChannelData(0);
  for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
  const source = audioContext.createBufferSource();
  source.buffer = buffer;
  source.connect(audioContext.destination);
  const startAt = Math.max(nextStart, audioContext.currentTime);
  source.start(startAt);
  nextStart = startAt + buffer.duration;
  state.scheduledSamples += pcm.length;
  const chunk = { index: event.chunk_index, lane: event.lane, arrivedMs, audioMs: 1000 * pcm.length / state.sampleRate,
                  playsAtMs: arrivedMs + 1000 * (startAt - audioContext.currentTime) };
  state.chunks.push(chunk);
  addRow(chunk);
}

function addRow(chunk) {
  const row = $("chunks").tBodies[0].insertRow();
  const cells = [chunk.index, chunk.lane, chunk.arrivedMs.toFixed(1), chunk.audioMs.toFixed(0), chunk.playsAtMs.toFixed(0)];
  cells.forEach((text) => { row.insertCell().textContent = text; });
  row.cells[1].className = chunk.lane || "";
  const first = state.chunks[0];
  $("summary").textContent = `TTFA ${first.arrivedMs.toFixed(1)} ms · ${state.chunks.length} chunks · ` +
    `${(state.scheduledSamples / state.sampleRate).toFixed(2)} s of audio`;
}

function setRunning(running) {
  $("speak-button").disabled = running;
  $("stop-button").disabled = !running;
  if (running) $("status").textContent = "speaking…";
}

function wavBlob(parts, rate) {
  const length = parts.reduce((n, p) => n + p.length, 0);
  const view = new DataView(new ArrayBuffer(44 + 2 * length));
  const text = (offset, s) => [...s].forEach((c, i) => view.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF"); view.setUint32(4, 36 + 2 * length, true); text(8, "WAVEfmt ");
  view.setUint32(16, 16, true); view.setUint16(20, 1, true); view.setUint16(22, 1, true);
  view.setUint32(24, rate, true); view.setUint32(28, 2 * rate, true); view.setUint16(32, 2, true);
  view.setUint16(34, 16, true); text(36, "data"); view.setUint32(40, 2 * length, true);
  let offset = 44;
  for (const part of parts) for (const s of part) { view.setInt16(offset, s, true); offset += 2; }
  return new Blob([view], { type: "audio/wav" });
}

async function download() {
  const format = $("format").value;
  let blob;
  if (format === "wav") {
    blob = wavBlob(pcmParts, state.sampleRate);
  } else {
    const response = await post(requestBody(format, "audio"));
    if (!response.ok) return showError(await errorMessage(response));
    blob = await response.blob();
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `voxlane.${format}`;
  link.click();
  state.downloaded = { format, bytes: blob.size };
}

async function loadModels() {
  const response = await fetch("/v1/models", { headers: authHeaders() });
  if (response.status === 401) {
    showError("this gateway needs an API key: enter it under 'API key' and reload the models");
    return;
  }
  const models = (await response.json()).data.map((m) => m.id);
  $("model").innerHTML = models.map((m) => `<option>${m}</option>`).join("");
  const voices = ["alloy", "nova", "echo", "shimmer"];
  $("voices").innerHTML = voices.map((v) => `<option value="${v}">`).join("");
}

const METRICS = {
  voxlane_gateway_streams_total: "streams served", voxlane_gateway_chunks_total: "chunks sent",
  'voxlane_gateway_chunk_write_ms{quantile="0.5"}': "chunk write p50 (ms)",
  'voxlane_gateway_chunk_write_ms{quantile="0.99"}': "chunk write p99 (ms)",
};

async function refreshMetrics() {
  try {
    const health = await (await fetch("/health")).json();
    const text = await (await fetch("/metrics")).text();
    const values = Object.fromEntries(text.split("\n").filter((l) => l && !l.startsWith("#"))
      .map((l) => [l.slice(0, l.lastIndexOf(" ")), l.slice(l.lastIndexOf(" ") + 1)]));
    const rows = Object.entries(METRICS).map(([key, label]) => [label, values[key] ?? "–"]);
    for (const server of health.servers) {
      rows.push([`${server.url}`, `${server.ready ? "ready" : "down"}, ${server.live_streams} live`]);
    }
    $("metrics").tBodies[0].innerHTML = rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join("");
    $("server-line").textContent = `model ${health.model} · mode ${health.mode} · ${health.status}`;
    state.metricsRefreshed = (state.metricsRefreshed || 0) + 1;
  } catch (e) {
    $("server-line").textContent = `gateway unreachable: ${e}`;
  }
}

$("speak-button").addEventListener("click", speak);
$("stop-button").addEventListener("click", () => controller && controller.abort());
$("download-button").addEventListener("click", download);
loadModels().catch((e) => showError(`could not list models: ${e}`));
$("api-key").addEventListener("change", () => loadModels().catch((e) => showError(`could not list models: ${e}`)));
refreshMetrics();
setInterval(refreshMetrics, 2000);
