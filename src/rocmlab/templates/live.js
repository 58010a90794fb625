"use strict";
// The instructor's live page (live.html.j2): renders the state JSON, polls it, posts hints.
// Served by the service itself (no CDN); every text goes in through textContent, never as HTML.
const CONFIG = JSON.parse(document.getElementById("live-config").textContent);
const T = CONFIG.t, XSRF = CONFIG.xsrf, POLL_MS = CONFIG.poll_ms, LANG = CONFIG.lang;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}
function since(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}
function rateClass(rate) {
  return rate === null ? "rate-none" : rate < 0.5 ? "rate-low" : rate < 0.8 ? "rate-mid" : "rate-high";
}
// null: nobody attempted the exercise yet (view.ExerciseRow.pass_rate), which is no failure
function rateText(rate) { return rate === null ? "—" : Math.round(rate * 100) + "%"; }
function score(row) { return row.score === null ? "–" : row.score + " / " + row.max_score; }

function renderLearners(rows) {
  const body = document.querySelector("#learners tbody");
  body.replaceChildren(...rows.map(row => el("tr", {"data-learner": row.learner},
    el("td", {}, row.learner),
    el("td", {}, el("code", {}, row.lab)),
    el("td", {class: "state-" + row.state.replace(" ", "-")}, row.state === "not submitted" ? T.not_submitted : row.state),
    el("td", {class: "num"}, score(row)),
    el("td", {class: "failing"}, ...row.failed.map(id => el("code", {}, id)),
      ...(row.not_attempted.length ? [el("span", {class: "muted"}, T.not_attempted + ": " + row.not_attempted.length)] : [])),
    el("td", {class: "num"}, since(row.idle_s)))));
  document.getElementById("learner-count").textContent = rows.length;
}

function hintForm(row) {
  const form = el("form", {class: "hint", "data-exercise": row.lab + "/" + row.grade_id},
    el("textarea", {name: "text_zh", placeholder: T.hint_zh}),
    el("textarea", {name: "text_en", placeholder: T.hint_en}),
    el("button", {type: "submit"}, T.send_hint + " → " + row.stuck.length),
    el("span", {class: "result muted"}));
  form.addEventListener("submit", event => { event.preventDefault(); sendHint(form, row); });
  return el("details", {}, el("summary", {}, row.stuck.length ? T.send_hint + " (" + row.stuck.length + ")" : T.hint), form);
}

function renderExercises(rows) {
  const body = document.querySelector("#exercises tbody");
  const open = new Set([...body.querySelectorAll("details[open] form")].map(form => form.dataset.exercise));
  const drafts = new Map([...body.querySelectorAll("form.hint")].map(form =>
    [form.dataset.exercise, [form.text_zh.value, form.text_en.value]]));
  body.replaceChildren(...rows.map(row => {
    const key = row.lab + "/" + row.grade_id;
    const hint = hintForm(row);
    if (open.has(key)) hint.open = true;
    if (drafts.has(key)) { const form = hint.querySelector("form"); [form.text_zh.value, form.text_en.value] = drafts.get(key); }
    return el("tr", {"data-exercise": key},
      el("td", {}, el("code", {}, row.lab)),
      el("td", {}, el("code", {}, row.grade_id)),
      el("td", {class: "num " + rateClass(row.pass_rate), "data-rate": row.pass_rate === null ? "" : row.pass_rate,
        title: row.pass_rate === null ? T.not_attempted + ": " + row.not_attempted : ""}, rateText(row.pass_rate)),
      el("td", {class: "num"}, row.passed + " / " + row.graded),
      el("td", {}, row.failures.length ? el("ul", {class: "failures"}, ...row.failures.map(([message, count]) =>
        el("li", {}, el("span", {class: "count"}, count + "× "), message))) : ""),
      el("td", {}, hint));
  }));
}

function recipients(sentTo) {
  const names = Object.entries(sentTo).map(([name, error]) => error ? name + " (" + error + ")" : name);
  return names.join(", ") || T.nobody_stuck;
}

function renderHints(hints) {
  document.getElementById("hints").replaceChildren(...hints.map(hint => el("li", {},
    el("code", {}, hint.lab + " / " + hint.grade_id), " ",
    hint.text[LANG] || hint.text.en || hint.text.zh, " — " + T.sent_to + ": ",
    recipients(hint.sent_to))));
}

function renderRoom(room) {
  document.getElementById("queued").textContent = room.queued;
  document.getElementById("grading").textContent = room.grading;
  document.getElementById("oldest-wait").textContent = since(room.oldest_wait_s);
  document.getElementById("alive-workers").textContent = room.alive_workers;
  document.getElementById("no-worker").hidden = room.alive_workers > 0;
  // supervise.worker_states: alive, silent (red: someone should look), ended (grey); an earlier run's are left out
  document.querySelector("#workers tbody").replaceChildren(...room.workers.map(w =>
    el("tr", {class: w.state === "alive" ? "alive" : w.state === "ended" ? "ended" : "dead", "data-state": w.state},
      el("td", {}, w.worker), el("td", {class: "num"}, since(w.seen_s)), el("td", {}, w.attempt === null ? "–" : "#" + w.attempt),
      el("td", {}, T["worker_" + w.state] || w.state))));
  document.getElementById("refused-workers").replaceChildren(...room.refused.map(r =>
    el("p", {class: "alarm", "data-worker": r.name}, T.worker_refused + " (" + r.name + "): ", el("code", {}, r.message))));
}

function points(value, max) { return value === null ? "–" : value + (max === null ? "" : " / " + max); }

function renderRegradeLabs(labs) {
  const select = document.querySelector("#regrade-form select");
  const chosen = select.value;
  select.replaceChildren(...labs.map(lab => el("option", {value: lab}, lab)));
  if (labs.includes(chosen)) select.value = chosen;
}

function regradeRow(item) {
  const change = item.new_score === null || item.old_score === null ? ""
    : item.new_score > item.old_score ? "regrade-up" : item.new_score < item.old_score ? "regrade-down" : "";
  return el("tr", {"data-learner": item.learner, class: change},
    el("td", {}, item.learner),
    el("td", {class: "num before"}, points(item.old_score, item.max_score)),
    el("td", {class: "num after"}, points(item.new_score, item.max_score)),
    el("td", {class: "state-" + item.new_state}, item.skipped ? T.skipped + ": " + item.skipped : item.new_state));
}

function renderRegrades(regrades) {
  document.getElementById("regrades").replaceChildren(...regrades.map(regrade => {
    const p = regrade.progress, made = regrade.items.length - p.skipped;
    return el("details", {class: "regrade", "data-regrade": regrade.id, open: ""},
      el("summary", {}, el("code", {}, regrade.lab), " · " + new Date(regrade.created_at * 1000).toLocaleTimeString() +
        " · " + (p.graded + p.failed) + " / " + made + " · " + T.queued + " " + p.queued + " · " + T.grading + " " +
        p.grading + (p.skipped ? " · " + T.skipped + " " + p.skipped : "")),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, T.learner), el("th", {}, T.before),
        el("th", {}, T.after), el("th", {}, T.regrade_state))), el("tbody", {}, ...regrade.items.map(regradeRow))));
  }));
}

async function regradeLab(form) {
  const lab = form.lab.value, result = form.querySelector(".result");
  if (!lab || !window.confirm(T.regrade_confirm.replace("{lab}", lab))) return;
  const response = await fetch("instructor/api/regrade", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-XSRFToken": XSRF}, body: JSON.stringify({lab}),
  });
  const answer = await response.json().catch(() => ({error: response.statusText}));
  result.textContent = response.ok ? "" : answer.error || response.status;
  poll();
}

function render(state) {
  renderRoom(state.room);
  renderLearners(state.learners);
  renderExercises(state.exercises);
  renderHints(state.hints);
  renderRegradeLabs(state.labs);
  renderRegrades(state.regrades);
  document.getElementById("updated").textContent = new Date(state.now * 1000).toLocaleTimeString();
}

async function sendHint(form, row) {
  const result = form.querySelector(".result");
  const response = await fetch("instructor/api/hints", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "X-XSRFToken": XSRF},
    body: JSON.stringify({lab: row.lab, grade_id: row.grade_id, text_zh: form.text_zh.value, text_en: form.text_en.value}),
  });
  const answer = await response.json().catch(() => ({error: response.statusText}));
  if (!response.ok) { result.textContent = answer.error || response.status; return; }
  result.textContent = T.sent_to + ": " + recipients(answer.sent_to);
  form.text_zh.value = ""; form.text_en.value = "";
  poll();
}

async function poll() {
  try {
    // the hub's cookie login asks a script's request for the xsrf token, a GET too
    const response = await fetch("instructor/api/state",
      {credentials: "same-origin", cache: "no-store", headers: {"X-XSRFToken": XSRF}});
    if (response.ok) render(await response.json());
  } catch (error) { /* the next poll tries again */ }
}

document.getElementById("regrade-form").addEventListener("submit", event => {
  event.preventDefault(); regradeLab(event.target);
});
render(JSON.parse(document.getElementById("initial-state").textContent));
setInterval(poll, POLL_MS);
