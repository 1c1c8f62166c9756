() => {
  /* The dashboard's player: ▶ Play / ❚❚ Pause for each trajectory and one lockstep control for all runs.

     Gradio draws gr.Plot with Plotly.react, which drops a figure's frames, so
     trajectory_figure carries them in layout.meta.s2d2 (its Python half is
     components/player.py); this script adds them with Plotly.addFrames
     whenever a new figure appears. Every step change,
     from Play, from the slider or from the lockstep clock, arrives as a
     plotly_animatingframe event, and then the step's sentence, the run's text
     and the residual-energy outline follow.

     The inspector: a click on a trajectory cell or on a token of a run's text
     asks the server for that position's panel by writing "run|step|position|nonce"
     into the hidden #inspect-request box; the arrow keys move it across
     positions and steps, and while it is open it follows Play. */
  const STEP_MS = 350;      // per-trajectory Play: about 3 steps per second
  const FORWARD_MS = 250;   // lockstep: about 4 forwards per second
  // Heatmaps cannot be tweened: a transition only blanks the figure until it ends, so frames switch at once.
  const MOVE = { mode: "immediate", frame: { duration: 300, redraw: true }, transition: { duration: 0 } };
  const timers = {};
  let clock = null;
  const inspecting = {};  // run -> { step, position } of its open inspector
  let lastInspected = null;  // the run the arrow keys move
  let nonce = 0;

  const meta = (div) => div && div.layout && div.layout.meta && div.layout.meta.s2d2;
  const plotOf = (id) => document.querySelector(`#${id} .js-plotly-plot`);
  const trajectories = () => [...document.querySelectorAll(".js-plotly-plot")].filter((d) => meta(d) && meta(d).kind === "trajectory");
  const playerOf = (run) => document.querySelector(`.player[data-run="${run}"]`);

  function reveal(run, visible) {
    const box = document.querySelector(`#text-${run.toLowerCase()}`);
    if (!box) return;
    box.querySelectorAll(".tok").forEach((t) => t.classList.toggle("tok-future", !visible(t)));
  }

  function clearReveal() {
    document.querySelectorAll(".tok-future").forEach((t) => t.classList.remove("tok-future"));
  }

  function showStep(div, index) {
    const m = meta(div);
    div._s2d2Index = index;
    const step = m.steps[index];
    const player = playerOf(m.run);
    if (player) {
      const line = player.querySelector(".narration");
      if (line) line.textContent = m.narration[index];
      player.dataset.step = String(step);
    }
    if (!clock) reveal(m.run, (t) => Number(t.dataset.step) <= step);
    if (m.run === "S2D2") outlineEnergy(step);
    if (inspecting[m.run] && inspecting[m.run].step !== step) inspect(m.run, step, inspecting[m.run].position);
  }

  function sendRequest(text) {
    const box = document.querySelector("#inspect-request textarea, #inspect-request input");
    if (!box) return;
    box.value = text;
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }

  function inspect(run, step, position) {
    const div = trajectories().find((d) => meta(d).run === run);
    const m = div && meta(div);
    if (m) {
      step = Math.max(0, Math.min(step, m.total_steps - 1));
      position = Math.max(0, Math.min(position, m.positions - 1));
    }
    inspecting[run] = { step, position };
    lastInspected = run;
    nonce += 1;
    sendRequest(`${run}|${step}|${position}|${nonce}`);
  }

  function closeInspector(run) {
    delete inspecting[run];
    if (lastInspected === run) lastInspected = null;
    nonce += 1;
    sendRequest(`${run}|close|${nonce}`);
  }

  function showTrajectoryTab() {
    const tab = [...document.querySelectorAll('button[role="tab"]')].find((b) => b.textContent.trim() === "Trajectory");
    if (tab && tab.getAttribute("aria-selected") !== "true") tab.click();
  }

  function outlineEnergy(step) {
    const div = plotOf("plot-energy");
    const m = meta(div);
    if (!m || !window.Plotly) return;
    const row = m.row_of_step[Math.min(step, m.row_of_step.length - 1)];
    const key = `shapes[${m.shape}]`;
    window.Plotly.relayout(div, { [`${key}.y0`]: row - 0.5, [`${key}.y1`]: row + 0.5, [`${key}.visible`]: row >= 0 });
  }

  function attach() {
    if (!window.Plotly) return;
    for (const div of trajectories()) {
      const m = meta(div);
      if (div._s2d2Meta === m) continue;
      div._s2d2Meta = m;
      div._s2d2Index = div._s2d2Target = m.steps.length - 1;
      delete inspecting[m.run];  // new results come with a closed inspector
      stop(m.run);
      window.Plotly.deleteFrames(div).then(() => window.Plotly.addFrames(div, m.frames));
      if (!div._s2d2Listening) {
        div._s2d2Listening = true;
        div.on("plotly_animatingframe", (e) => {
          const index = meta(div).steps.indexOf(Number(e.name));
          if (index >= 0) showStep(div, index);
        });
        div.on("plotly_click", (e) => {
          const point = e.points && e.points[0];
          if (!point) return;
          const m = meta(div);
          // A click on the step × position grid, or on the sequence strip (read at the step shown).
          if (point.curveNumber === m.curves.grid) inspect(m.run, Number(point.y), Number(point.x));
          else if (point.curveNumber === m.curves.strip) inspect(m.run, m.steps[div._s2d2Index], Number(point.x));
        });
      }
    }
  }

  function label(run, playing) {
    const button = playerOf(run) && playerOf(run).querySelector(".play-button");
    if (button) button.textContent = playing ? "❚❚ Pause" : "▶ Play";
  }

  function stop(run) {
    if (timers[run]) clearInterval(timers[run]);
    delete timers[run];
    label(run, false);
  }

  function go(div, index) {
    // Remember what was asked: re-asking before the last animation ends would restart it forever.
    div._s2d2Target = index;
    return window.Plotly.animate(div, [String(meta(div).steps[index])], MOVE);
  }

  function play(run) {
    const div = trajectories().find((d) => meta(d).run === run);
    if (!div) return;
    stopClock();
    const last = meta(div).steps.length - 1;
    let index = div._s2d2Index >= last ? 0 : div._s2d2Index + 1;
    go(div, index);
    label(run, true);
    timers[run] = setInterval(() => {
      if (index >= last) return stop(run);
      index += 1;
      go(div, index);
    }, STEP_MS);
  }

  function stopClock() {
    if (clock) clearInterval(clock.timer);
    clock = null;
    const button = document.querySelector(".play-all-button");
    if (button) button.textContent = "▶ Play all runs by forward";
  }

  function playAll() {
    Object.keys(timers).forEach(stop);
    const tokens = [...document.querySelectorAll(".run-text .tok")];
    const total = Math.max(1, ...tokens.map((t) => Number(t.dataset.f)));
    const button = document.querySelector(".play-all-button");
    const line = document.querySelector(".player-all .clock");
    clock = { forward: 0 };
    if (button) button.textContent = "❚❚ Pause";
    const tick = () => {
      const f = clock.forward;
      for (const run of ["AR", "Baseline", "S2D2"]) reveal(run, (t) => Number(t.dataset.f) <= f);
      const done = [];
      for (const div of trajectories()) {
        const m = meta(div);
        let index = 0;
        m.forwards.forEach((spent, i) => { if (spent <= f) index = i; });
        if (index !== div._s2d2Target) go(div, index);
        if (m.forwards[m.forwards.length - 1] <= f) done.push(m.run);
      }
      if (line) line.textContent = `forward ${f} of ${total}` + (done.length ? ` · finished: ${done.join(", ")}` : "");
      if (f >= total) { stopClock(); return; }
      clock.forward += 1;
    };
    tick();
    clock.timer = setInterval(tick, FORWARD_MS);
  }

  /* The walk-through (components/guide.py): its panel comes in the S2D2 inspector's place, asked for as
     "S2D2|guide|step|part|nonce"; each part names its step and positions, which get an outline here. */
  function guide(step, part) {
    showTrajectoryTab();
    nonce += 1;
    delete inspecting.S2D2;
    sendRequest(`S2D2|guide|${step}|${part}|${nonce}`);
  }

  let outlined = "";
  function followGuide() {
    const panel = document.querySelector("#inspector-s2d2 .guide[data-step]");
    const div = trajectories().find((d) => meta(d).run === "S2D2");
    const key = panel ? `${panel.dataset.step}|${panel.dataset.part}|${panel.dataset.positions}` : "";
    if (!div || !window.Plotly || key === outlined) return;
    const first = !outlined;
    outlined = key;
    const shapes = div.layout.shapes || [];
    if (div._s2d2Guide === undefined || div._s2d2Guide >= shapes.length) div._s2d2Guide = shapes.length;
    const positions = panel && panel.dataset.positions ? panel.dataset.positions.split(",").map(Number) : [];
    const step = panel ? Number(panel.dataset.step) : 0;
    const box = positions.length
      ? { type: "rect", xref: "x2", yref: "y2", x0: Math.min(...positions) - 0.5, x1: Math.max(...positions) + 0.5,
          y0: step - 0.5, y1: step + 0.5, line: { color: "#111827", width: 3 }, fillcolor: "rgba(250,204,21,0.25)", visible: true }
      : { type: "rect", xref: "x2", yref: "y2", x0: 0, x1: 0, y0: 0, y1: 0, visible: false };
    window.Plotly.relayout(div, { [`shapes[${div._s2d2Guide}]`]: box });
    if (panel) {
      const index = meta(div).steps.indexOf(step);
      if (index >= 0 && index !== div._s2d2Index) go(div, index);
      if (first) panel.scrollIntoView({ block: "nearest" });
    }
  }

  document.addEventListener("keydown", (event) => {
    const run = lastInspected;
    if (!run || !inspecting[run] || event.altKey || event.ctrlKey || event.metaKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable]")) return;
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    const move = moves[event.key];
    if (!move) return;
    event.preventDefault();
    inspect(run, inspecting[run].step + move[0], inspecting[run].position + move[1]);
  });

  /* After Run, bring the results into view: the headline at the top of the window (on a phone too), so a
     visitor does not have to scroll past the examples to see what happened. */
  let ranAt = 0;
  let headlineBefore = "";
  let sawDecoding = false;
  function revealResults() {
    const headline = document.querySelector("#headline .headline");
    if (!ranAt) return;
    if (performance.now() - ranAt > 120000) { ranAt = 0; return; }
    // Wait for the finished runs' headline and a cleared status: an error leaves its message in the status
    // (and the old headline), and nothing scrolls away from it.
    if (!headline) return;
    if (headline.innerText.startsWith("Decoding")) { sawDecoding = true; return; }
    // A rerun of a saved example ends on the very headline it started from, so its "Decoding…" in between counts too.
    if (!sawDecoding && headline.innerHTML === headlineBefore) return;
    const status = document.querySelector("#status");
    if (status && status.innerText.trim() !== "") return;  // the status clears with the results; an error stays
    ranAt = 0;
    heldUntil = performance.now() + 2800;
    headline.scrollIntoView({ block: "start", behavior: "smooth" });
  }

  /* The figures below (and, on a loaded server, the status above) settle after the headline arrives: once the
     smooth scroll is done, for two seconds the headline is kept at the top, unless the visitor scrolls or clicks. */
  let heldUntil = 0;
  function holdResults() {
    const now = performance.now();
    if (now > heldUntil || now < heldUntil - 2000) return;
    const headline = document.querySelector("#headline .headline");
    if (headline && Math.abs(headline.getBoundingClientRect().top) > 2) headline.scrollIntoView({ block: "start" });
  }
  for (const kind of ["wheel", "touchstart", "keydown", "pointerdown"]) document.addEventListener(kind, () => { heldUntil = 0; });

  document.addEventListener("click", (event) => {
    if (event.target.closest("#run")) {
      ranAt = performance.now();
      const headline = document.querySelector("#headline .headline");
      headlineBefore = headline ? headline.innerHTML : "";
      sawDecoding = false;
    }
    const how = event.target.closest(".open-how");
    if (how) {
      event.preventDefault();
      const tab = [...document.querySelectorAll('button[role="tab"]')].find((b) => b.textContent.trim() === "How it works");
      if (tab) { tab.click(); window.scrollTo({ top: 0 }); }
      return;
    }
    const walk = event.target.closest(".guide-start, .guide-go");
    if (walk) {
      guide(walk.dataset.step || "auto", walk.dataset.part || "0");
      return;
    }
    const whatIf = event.target.closest(".whatif-go");
    if (whatIf) {
      // The forced run is a whole decode: say so at once, and keep Play from replacing the answer.
      const { run, step, position, token } = whatIf.dataset;
      delete inspecting[run];
      const offer = whatIf.closest(".whatif-offer");
      if (offer) offer.innerHTML = `<span class="whatif-busy">Decoding again with ${whatIf.textContent} forced…</span>`;
      nonce += 1;
      sendRequest(`${run}|whatif|${step}|${position}|${token}|${nonce}`);
      return;
    }
    const rewind = event.target.closest(".rewind-go");
    if (rewind) {
      // A rewind decodes the run again from its step with the form's settings: a whole decode, like a what-if.
      const { run, step, position } = rewind.dataset;
      const form = rewind.closest(".rewind-offer");
      const value = (name) => form.querySelector(`[name="${name}"]`).value;
      const settings = form.dataset.fields.split("|").map(value).join("|");  // in the order the server reads them
      delete inspecting[run];
      form.innerHTML = `<span class="whatif-busy">Decoding again from step ${step} with ${value("method")}…</span>`;
      nonce += 1;
      sendRequest(`${run}|rewind|${step}|${position}|${settings}|${nonce}`);
      return;
    }
    const back = event.target.closest(".whatif-back");
    if (back) {
      inspect(back.closest(".inspector").dataset.run, Number(back.dataset.step), Number(back.dataset.position));
      return;
    }
    const close = event.target.closest(".insp-close");
    if (close) {
      closeInspector(close.closest(".inspector").dataset.run);
      return;
    }
    const token = event.target.closest("#text-s2d2 .tok, #text-baseline .tok");
    if (token) {
      const run = token.closest("#text-s2d2") ? "S2D2" : "Baseline";
      showTrajectoryTab();
      inspect(run, Number(token.dataset.step), Number(token.dataset.pos));
      return;
    }
    const one = event.target.closest(".play-button");
    if (one) {
      const run = one.closest(".player").dataset.run;
      if (timers[run]) stop(run); else play(run);
      return;
    }
    if (event.target.closest(".play-all-button")) {
      if (clock) { stopClock(); clearReveal(); } else playAll();
    }
  });
  function titleExamples() {
    const data = document.querySelector("#example-prompts [data-prompts]");
    const chips = [...document.querySelectorAll("#examples .gallery-item")];
    if (!data || !chips.length || chips[0].title) return;
    const hovers = JSON.parse(data.dataset.prompts);
    chips.forEach((chip, i) => { if (hovers[i]) chip.title = hovers[i]; });
  }

  setInterval(() => { attach(); followGuide(); revealResults(); holdResults(); titleExamples(); }, 300);
}
