// hermes-state dashboard: live refresh over /events, and token-authenticated actions.
// The server renders every view; this script only re-fetches a view's fragment on a change.
"use strict";
(function () {
  const TOKEN_KEY = "hermes-state-dashboard-token";
  const live = document.getElementById("live");
  const flash = document.getElementById("flash");
  const region = document.querySelector("[data-refresh]");
  // A refresh re-runs the page's queries: at most one a second per tab, the first one soon.
  const SOON_MS = 100;
  const SPACING_MS = 1000;
  let pending = null;
  let lastRefresh = 0;

  function say(text, isError) {
    flash.textContent = text;
    flash.className = isError ? "flash error" : "flash";
    flash.hidden = false;
  }

  function refreshUrl() {
    const url = new URL(region.dataset.refresh, window.location.href);
    if (region.id === "overview") {
      new URLSearchParams(window.location.search).forEach((v, k) => url.searchParams.set(k, v));
    }
    url.searchParams.set("fragment", "1");
    return url;
  }

  async function refresh() {
    pending = null;
    lastRefresh = Date.now();
    if (!region) return;
    const response = await fetch(refreshUrl(), { headers: { Accept: "text/html" } });
    if (response.ok) {
      region.innerHTML = await response.text();
      document.body.dataset.refreshed = String(Date.now());
    }
  }

  function scheduleRefresh() {
    if (pending !== null) return;
    const wait = Math.max(SOON_MS, lastRefresh + SPACING_MS - Date.now());
    pending = setTimeout(refresh, wait);
  }

  if (window.EventSource && region) {
    const source = new EventSource("/events");
    source.addEventListener("open", () => {
      live.textContent = "live";
      live.className = "live on";
    });
    source.addEventListener("error", () => {
      live.textContent = "reconnecting";
      live.className = "live off";
    });
    source.addEventListener("handoff", (message) => {
      const event = JSON.parse(message.data);
      const only = region.dataset.session;
      if (only === undefined || only === event.session_id) scheduleRefresh();
    });
  }

  function token(ask) {
    let value = sessionStorage.getItem(TOKEN_KEY);
    if (!value || ask) {
      value = window.prompt("Dashboard token (from --token / HERMES_STATE_DASHBOARD_TOKEN):");
      if (value) sessionStorage.setItem(TOKEN_KEY, value.trim());
    }
    return value ? value.trim() : "";
  }

  const tokenButton = document.getElementById("token-button");
  if (tokenButton) {
    tokenButton.hidden = false;
    tokenButton.addEventListener("click", () => token(true));
  }

  document.addEventListener("click", async (click) => {
    const button = click.target.closest("button.action");
    if (!button) return;
    const headers = { "Content-Type": "application/json" };
    const secret = token(false);
    if (secret) headers.Authorization = "Bearer " + secret;
    button.disabled = true;
    try {
      const response = await fetch(button.dataset.url, {
        method: "POST",
        headers: headers,
        credentials: "omit",
        body: "{}",
      });
      const body = await response.json().catch(() => ({}));
      if (response.ok) {
        const what = body.reclaimed ? "reclaimed " + body.reclaimed.length + " handoff(s)" : "done";
        say(button.dataset.action + ": " + what, false);
        scheduleRefresh();
      } else {
        if (response.status === 401) sessionStorage.removeItem(TOKEN_KEY);
        say(button.dataset.action + " refused: " + (body.error || response.status), true);
      }
    } finally {
      button.disabled = false;
    }
  });
})();
