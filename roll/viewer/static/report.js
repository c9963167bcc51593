/* roll view: renders the run data embedded in the page (script#roll-data) into the summary,
 * SVG learning curves, the trajectory browser and the token view. No libraries, no network.
 * Model and environment text is only ever inserted as text nodes, never as HTML. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("roll-data").textContent);
  var PALETTE = ["#2962c4", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#e67700", "#5c940d",
                 "#364fc7", "#a61e4d"];
  var SVGNS = "http://www.w3.org/2000/svg";

  // ---- DOM helpers ---------------------------------------------------------------------------
  function el(tag, attrs) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === "text") node.textContent = String(v);
      else if (k.indexOf("on") === 0) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, String(v));
    });
  }
  function append(node) {  // append(node, child, child, ...): nodes, text, arrays; null skipped
    for (var i = 1; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined || child === false) continue;
      if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); continue; }
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function fmt(v, digits) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
    var d = digits === undefined ? 3 : digits;
    return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2) : v.toFixed(d);
  }
  function successCell(s) {
    if (s === null || s === undefined) return el("span", {"class": "muted", text: "-"});
    return el("span", {"class": s ? "ok" : "fail", text: s ? "success" : "fail"});
  }

  // ---- summary, notes, config ------------------------------------------------------------------
  function renderSummary() {
    var s = DATA.summary, rows = [
      ["pipeline", s.pipeline], ["model", s.model], ["run directory", s.run_dir],
      ["steps", s.steps_logged + (s.max_steps ? " / " + s.max_steps : "")],
      ["wall time", s.wall_s === null ? "-" : fmt(s.wall_s, 1) + " s"],
      ["advantage estimator", s.adv_estimator || "-"],
      ["final model", s.final_model ? "final_model/" : "not written"],
      ["latest checkpoint", s.latest_checkpoint === null ? "-" : "step " + s.latest_checkpoint],
      ["trajectory dumps", s.trajectory_steps + " step(s), " + s.trajectories_shown + " trajectories shown"]
    ];
    var last = Object.keys(s.last).map(function (k) { return [k, fmt(s.last[k])]; });
    function kv(id, caption, items) {
      return el("table", {"class": "kv", id: id}, caption ? el("caption", {text: caption}) : null,
        items.map(function (r) { return el("tr", null, el("td", {text: r[0]}), el("td", {text: r[1]})); }));
    }
    append(document.getElementById("summary-body"), kv("summary-table", null, rows),
           last.length ? kv("latest-table", "latest values (step " + s.steps_logged + ")", last) : null);
    var notes = document.getElementById("notes");
    DATA.notes.forEach(function (n) { append(notes, el("div", {"class": "note", text: n})); });
    document.getElementById("config-text").textContent = DATA.config_text || "(no config.yaml in the run directory)";
  }

  // ---- learning curves -----------------------------------------------------------------------
  var curveState = {tags: {}, splits: {}};
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; lo = lo - 1; }
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = span / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var ticks = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
    return ticks;
  }
  function chart(panel) {
    var W = 440, H = 230, L = 48, R = 10, T = 8, B = 28;
    var visible = panel.series.filter(function (s) {
      return (!s.tag || curveState.tags[s.tag] !== false) && curveState.splits[s.split] !== false;
    });
    var xs = [], ys = [];
    visible.forEach(function (s) { xs = xs.concat(s.x); ys = ys.concat(s.y); });
    var box = el("div", {"class": "chart", "data-panel": panel.id}, el("h3", {text: panel.title}));
    if (!visible.length) { append(box, el("p", {"class": "muted", text: "no series selected"})); return box; }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { var pad = Math.abs(y0) * 0.1 || 0.5; y0 -= pad; y1 += pad; }
    var xt = niceTicks(x0, x1, 6), yt = niceTicks(y0, y1, 5);
    y0 = Math.min(y0, yt[0]); y1 = Math.max(y1, yt[yt.length - 1]);
    function px(x) { return L + (x - x0) / (x1 - x0) * (W - L - R); }
    function py(y) { return T + (1 - (y - y0) / (y1 - y0)) * (H - T - B); }
    var g = svg("svg", {viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": panel.title,
                        "data-series": visible.length, "data-points": ys.length});
    yt.forEach(function (t) {
      append(g, svg("line", {"class": "grid", x1: L, x2: W - R, y1: py(t), y2: py(t)}));
      append(g, svg("text", {x: L - 4, y: py(t) + 3, "text-anchor": "end", text: fmt(t, 2)}));
    });
    xt.filter(function (t) { return t >= x0 && t <= x1 && Number.isInteger(t); }).forEach(function (t) {
      append(g, svg("text", {x: px(t), y: H - B + 14, "text-anchor": "middle", text: t}));
    });
    append(g, svg("line", {"class": "axis", x1: L, x2: W - R, y1: H - B, y2: H - B}));
    append(g, svg("line", {"class": "axis", x1: L, x2: L, y1: T, y2: H - B}));
    append(g, svg("text", {x: (L + W - R) / 2, y: H - 2, "text-anchor": "middle", text: "step"}));
    var legend = el("div", {"class": "legend"});
    visible.forEach(function (s) {
      var color = PALETTE[panel.series.indexOf(s) % PALETTE.length];
      var d = s.x.map(function (x, i) { return (i ? "L" : "M") + px(x).toFixed(1) + " " + py(s.y[i]).toFixed(1); }).join(" ");
      append(g, svg("path", {"class": "series" + (s.split.indexOf("val") === 0 ? " val" : ""), d: d, stroke: color,
                             "data-key": s.key, "data-n": s.x.length}));
      s.x.forEach(function (x, i) {
        append(g, svg("circle", {cx: px(x).toFixed(1), cy: py(s.y[i]).toFixed(1), r: 2.6, fill: color},
                      svg("title", {text: s.name + "  step " + x + ": " + fmt(s.y[i], 4)})));
      });
      append(legend, el("span", null, el("span", {"class": "swatch", style: "background:" + color}), s.name));
    });
    append(box, g, legend);
    return box;
  }
  function renderCurves() {
    var charts = clear(document.getElementById("charts"));
    if (!DATA.panels.length) {
      append(charts, el("p", {"class": "note", text: "No metrics yet (logs/metrics.jsonl is missing or empty)."}));
      return;
    }
    DATA.panels.forEach(function (p) { append(charts, chart(p)); });
  }
  function curveControls() {
    var tags = {}, splits = {};
    DATA.panels.forEach(function (p) {
      p.series.forEach(function (s) { if (s.tag) tags[s.tag] = 1; splits[s.split] = 1; });
    });
    var box = document.getElementById("curve-controls");
    function boxes(label, names, state, cls) {
      if (names.length < 2) return null;
      return el("span", {"class": cls}, el("label", {text: label + ":"}), names.map(function (n) {
        var cb = el("input", {type: "checkbox", checked: "checked", "data-name": n, onchange: function () {
          state[n] = cb.checked; renderCurves();
        }});
        return el("label", null, cb, " " + n);
      }));
    }
    append(box, boxes("env tag", Object.keys(tags).sort(), curveState.tags, "tag-filter"),
           boxes("split", Object.keys(splits).sort(), curveState.splits, "split-filter"));
  }

  // ---- trajectory browser --------------------------------------------------------------------
  var T = DATA.trajectories, filters = {step: "", tag: "", group: "", success: ""}, current = -1;
  function uniq(values) {
    var seen = {}, out = [];
    values.forEach(function (v) { var k = String(v); if (!seen[k]) { seen[k] = 1; out.push(v); } });
    return out;
  }
  function matches(r, skip) {
    return (skip === "step" || filters.step === "" || String(r.step) === filters.step) &&
           (skip === "tag" || filters.tag === "" || r.env_tag === filters.tag) &&
           (skip === "group" || filters.group === "" || r.group_id === filters.group) &&
           (filters.success === "" || String(r.success) === filters.success);
  }
  function select(name, label, options) {
    var s = el("select", {id: "filter-" + name, "data-filter": name, onchange: function () {
      filters[name] = s.value;
      if (name !== "group") filters.group = "";
      renderFilters(); renderList();
    }});
    append(s, el("option", {value: "", text: "all"}));
    options.forEach(function (o) {
      append(s, el("option", {value: String(o[0]), text: o[1], selected: String(o[0]) === filters[name] ? "selected" : null}));
    });
    return el("span", null, el("label", {"for": "filter-" + name, text: label + " "}), s);
  }
  function renderFilters() {
    var box = clear(document.getElementById("traj-filters"));
    var steps = uniq(T.map(function (r) { return r.step; })).sort(function (a, b) { return a - b; });
    var tags = uniq(T.map(function (r) { return r.env_tag; })).sort();
    var groups = uniq(T.filter(function (r) { return matches(r, "group"); }).map(function (r) { return r.group_id; }));
    append(box,
      select("step", "step", steps.map(function (s) { return [s, String(s)]; })),
      select("tag", "env tag", tags.map(function (t) { return [t, t]; })),
      select("group", "group", groups.map(function (g) { return [g, g]; })),
      select("success", "outcome", [["true", "success"], ["false", "fail"], ["null", "no outcome"]]));
  }
  function shortGroup(r) {  // "Sokoban/3" in the Sokoban row reads as "3"
    var p = r.env_tag + "/";
    return r.group_id.indexOf(p) === 0 ? r.group_id.slice(p.length) : r.group_id;
  }
  function renderList() {
    var box = clear(document.getElementById("traj-list"));
    var rows = [];
    T.forEach(function (r, i) { if (matches(r)) rows.push(i); });
    box.setAttribute("data-count", rows.length);
    if (!rows.length) { append(box, el("p", {"class": "muted", style: "padding:8px", text: "No trajectory matches the filters."})); return; }
    var head = el("tr", null, ["step", "env tag", "group", "return", "outcome", "adv.", "turns"].map(function (h) {
      return el("th", {text: h});
    }));
    append(box, el("table", null, el("thead", null, head), el("tbody", null, rows.map(function (i) {
      var r = T[i];
      return el("tr", {"class": "row" + (i === current ? " selected" : ""), "data-index": i, title: r.id,
                       onclick: function () { showTrajectory(i); }},
        el("td", {text: r.step}), el("td", {text: r.env_tag}), el("td", {text: shortGroup(r), title: r.group_id}),
        el("td", {text: fmt(r["return"])}), el("td", null, successCell(r.success)),
        el("td", {text: fmt(r.advantage)}), el("td", {text: r.num_turns}));
    }))));
  }

  // the parsed action inside the model text: the <answer> block, else the action words themselves
  function highlighted(text, action) {
    var node = el("pre");
    var cls = "action" + (action && !action.valid ? " invalid" : "");
    var m = /<answer>([\s\S]*?)<\/answer>/i.exec(text);
    var spans = [];
    if (m) {
      var start = m.index + m[0].indexOf(">") + 1;
      spans.push([start, start + m[1].length]);
    } else if (action && action.actions.length) {
      var lower = text.toLowerCase(), from = 0;
      action.actions.forEach(function (a) {
        var k = lower.indexOf(String(a).toLowerCase(), from);
        if (k >= 0 && a) { spans.push([k, k + a.length]); from = k + a.length; }
      });
    }
    var pos = 0;
    spans.forEach(function (s) {
      append(node, text.slice(pos, s[0]));
      append(node, el("mark", {"class": cls, text: text.slice(s[0], s[1])}));
      pos = s[1];
    });
    append(node, text.slice(pos));
    return node;
  }
  function actionBadges(action) {
    if (!action) return null;
    if (!action.valid) return el("div", null, el("span", {"class": "badge invalid", text: "invalid"}),
                                 el("span", {"class": "muted", text: action.error}));
    return el("div", null, action.actions.map(function (a) { return el("span", {"class": "badge", text: a}); }));
  }
  function advBar(adv, scale) {
    var bar = el("div", {"class": "advbar"});
    if (adv === null || adv === undefined || !scale) return bar;
    var w = Math.min(50, Math.abs(adv) / scale * 50);
    append(bar, el("span", {style: "left:" + (adv >= 0 ? 50 : 50 - w) + "%;width:" + w + "%;background:" +
                                   (adv >= 0 ? "#2b8a3e" : "#c0392b")}));
    return bar;
  }
  function showTrajectory(i) {
    current = i;
    var r = T[i], box = clear(document.getElementById("traj-detail"));
    box.setAttribute("data-index", i);
    Array.prototype.forEach.call(document.querySelectorAll("#traj-list tr.row"), function (tr) {
      tr.classList.toggle("selected", Number(tr.getAttribute("data-index")) === i);
    });
    append(box, el("h3", {id: "traj-title", text: r.id}));
    append(box, el("table", {"class": "kv"}, el("tr", null,
      [["kind", r.kind], ["step", r.step], ["env tag", r.env_tag], ["env", r.env_id], ["group", r.group_id],
       ["seed", r.seed], ["return", fmt(r["return"])], ["advantage", fmt(r.advantage)],
       ["trained on", fmt(r.trained)], ["end", r.failure ? "failed: " + r.failure : r.terminated ? "terminated" :
        r.truncated ? "truncated" : "-"]].map(function (kv) {
        return el("td", null, el("span", {"class": "muted", text: kv[0] + " "}), String(kv[1] === null ? "-" : kv[1]));
      }))));
    append(box, el("div", null, "outcome: ", successCell(r.success)));
    var info = Object.keys(r.info || {});
    if (info.length) {
      append(box, el("details", {id: "traj-info"}, el("summary", {text: "episode info (" + info.length + ")"}),
        el("table", {"class": "kv"}, info.map(function (k) {
          return el("tr", null, el("td", {text: k}), el("td", {text: fmt(r.info[k], 4)}));
        }))));
    }
    // turns side by side
    append(box, el("h3", {text: "Turns"}));
    var table = el("table", {"class": "turns", id: "turns-table"},
      el("colgroup", null, el("col", {"class": "n"}), el("col"), el("col"), el("col", {"class": "r"}), el("col", {"class": "v"})),
      el("tr", null, ["#", "observation", "model text (parsed action highlighted)", "reward", "policy"].map(function (h) {
        return el("th", {text: h});
      })));
    r.turns.forEach(function (t, k) {
      append(table, el("tr", {"class": "turn"}, el("td", {text: k + 1}),
        el("td", {"class": "obs"}, el("pre", {text: t.observation})),
        el("td", {"class": "model"}, highlighted(t.model_text, t.action), actionBadges(t.action)),
        el("td", {text: fmt(t.reward)}), el("td", {text: t.policy_version === null ? "-" : "v" + t.policy_version})));
    });
    append(box, table);
    // the group's members side by side
    var members = [];
    T.forEach(function (o, j) { if (o.step === r.step && o.group_id === r.group_id) members.push(j); });
    var scale = Math.max.apply(null, members.map(function (j) { return Math.abs(T[j].advantage || 0); }).concat([1e-9]));
    append(box, el("h3", {text: "Group " + r.group_id + " (" + members.length + " in this dump)"}));
    append(box, el("div", {"class": "group", id: "group-members"}, members.map(function (j) {
      var o = T[j], last = o.turns.length ? o.turns[o.turns.length - 1] : null;
      return el("div", {"class": "member" + (j === i ? " current" : ""), "data-index": j, onclick: function () { showTrajectory(j); }},
        el("div", null, el("b", {text: o.id.split("/").pop() || o.id})),
        el("div", null, "return ", el("b", {text: fmt(o["return"])}), "  ", successCell(o.success)),
        el("div", null, "advantage ", el("b", {text: fmt(o.advantage)})), advBar(o.advantage, scale),
        el("div", {"class": "muted", text: o.num_turns + " turn(s)"}),
        last ? highlighted(last.model_text, last.action) : null);
    })));
    renderTokens(r);
  }

  // ---- token view ----------------------------------------------------------------------------
  function tokenColor(mode, v, scale) {
    if (v === null || v === undefined) return null;
    if (mode === "advantage") {
      var a = Math.min(1, Math.abs(v) / scale);
      return v >= 0 ? "rgba(43,138,62," + (0.12 + 0.6 * a) + ")" : "rgba(192,57,43," + (0.12 + 0.6 * a) + ")";
    }
    if (mode === "logprob") {  // probability of the sampled token: red (unlikely) to green (certain)
      var p = Math.exp(v), hue = Math.round(120 * p);
      return "hsla(" + hue + ",70%,55%,0.45)";
    }
    return "rgba(41,98,196,0.18)";
  }
  function renderTokens(r) {
    var box = document.getElementById("traj-detail");
    var old = document.getElementById("token-view");
    if (old) old.parentNode.removeChild(old);
    var wrap = el("div", {id: "token-view"}, el("h3", {text: "Tokens"}));
    append(box, wrap);
    var tk = r.tokens;
    if (!tk || !tk.ids.length) { append(wrap, el("p", {"class": "muted", text: "No token data in this dump."})); return; }
    var modes = [];
    if (tk.advantages) modes.push("advantage");
    if (tk.logprobs) modes.push("logprob");
    modes.push("mask");
    var mode = modes[0];
    var sel = el("select", {id: "token-mode", onchange: function () { mode = sel.value; draw(); }},
                 modes.map(function (m) { return el("option", {value: m, text: m}); }));
    var legend = el("span", {"class": "muted"});
    append(wrap, el("div", {"class": "controls"}, el("label", {"for": "token-mode", text: "colour by "}), sel, legend,
                    tk.truncated ? el("span", {"class": "note", text: "cut to the first " + tk.ids.length + " tokens"}) : null));
    var area = el("div", {"class": "tokens", id: "tokens"});
    append(wrap, area);
    function draw() {
      clear(area);
      var vals = mode === "advantage" ? tk.advantages : mode === "logprob" ? tk.logprobs : null;
      var scale = 1e-9;
      if (vals) tk.mask.forEach(function (m, k) { if (m) scale = Math.max(scale, Math.abs(vals[k])); });
      legend.textContent = mode === "advantage" ? "green > 0 > red, max |A| = " + fmt(scale) :
        mode === "logprob" ? "sampled-token probability: red (low) to green (high)" : "blue: trained (loss) tokens";
      var frag = document.createDocumentFragment();
      tk.ids.forEach(function (id, k) {
        var text = tk.text[k], trained = !!tk.mask[k];
        var title = "#" + k + " id " + id + (trained ? " (model)" : " (context)");
        if (tk.logprobs && trained) title += "  logprob " + fmt(tk.logprobs[k], 4) + "  p " + fmt(Math.exp(tk.logprobs[k]), 3);
        if (tk.advantages && trained) title += "  advantage " + fmt(tk.advantages[k], 4);
        var bg = trained ? tokenColor(mode, vals ? vals[k] : 1, scale) : null;
        frag.appendChild(el("span", {"class": "tok" + (trained ? " model" : " ctx"), title: title,
                                     style: bg ? "background:" + bg : null, text: text}));
      });
      area.appendChild(frag);
    }
    draw();
  }

  // ---- text dumps of older runs ---------------------------------------------------------------
  function renderTextDumps() {
    var steps = Object.keys(DATA.text_dumps).map(Number).sort(function (a, b) { return a - b; });
    var box = document.getElementById("text-dumps");
    if (!steps.length) return;
    var pre = el("pre", {"class": "mono", id: "text-dump"});
    var sel = el("select", {onchange: function () { pre.textContent = DATA.text_dumps[sel.value]; }},
                 steps.map(function (s) { return el("option", {value: s, text: "step " + s}); }));
    append(box, el("h3", {text: "Text dumps (older format)"}), el("div", {"class": "controls"}, sel), pre);
    pre.textContent = DATA.text_dumps[steps[0]];
  }

  renderSummary();
  curveControls();
  renderCurves();
  if (T.length) {
    renderFilters();
    renderList();
    showTrajectory(0);
  } else {
    clear(document.getElementById("traj-filters"));
    clear(document.getElementById("traj-list")).setAttribute("data-count", 0);
    append(clear(document.getElementById("traj-detail")), el("p", {"class": "note", id: "no-trajectories",
      text: DATA.no_trajectories_note}));
  }
  renderTextDumps();
  document.body.setAttribute("data-ready", "1");
})();
