// Headless Chromium against a running gateway's /dashboard:
//   node tests/browser/dashboard.mjs http://127.0.0.1:PORT [SCREENSHOT.png]
// Checks that the page shows every target of /admin/status with its breaker state, that a
// breaker forced open through the admin API shows as open, that the page's own buttons close
// and open it (with SWITCHYARD_ADMIN_KEY set, against a gateway with [auth] admin_keys: asking
// for the admin key once, and once more when SWITCHYARD_CLIENT_KEY is given first and refused), that the event list shows the transition, and that the page loads nothing from
// anywhere but the gateway and logs no errors. Saves a screenshot (default target/dashboard.png)
// and prints its path. Exit status 0 on success, 1 on a failed check, 2 on bad usage.
//
// The browser is Debian's chromium (CHROMIUM overrides /usr/bin/chromium), driven by
// playwright-core; `npm ci` in this directory installs it.

import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const base = (process.argv[2] || "").replace(/\/$/, "");
if (!/^https?:\/\//.test(base)) {
  console.error("usage: node dashboard.mjs GATEWAY_URL [SCREENSHOT.png]");
  process.exit(2);
}
const shot = path.resolve(process.argv[3] || path.join(here, "..", "..", "target", "dashboard.png"));
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const step = (msg) => console.log(`dashboard test: ${msg}`);

// An admin key, when the gateway has [auth] admin_keys: the admin API needs it, and the page's
// buttons ask for it once (a prompt) and keep it for the tab.
const key = process.env.SWITCHYARD_ADMIN_KEY || "";
// A client key the first prompt is answered with, when set: the gateway refuses it (403) and
// the page must ask again.
const clientKey = key ? process.env.SWITCHYARD_CLIENT_KEY || "" : "";
const wantPrompts = key ? (clientKey ? 2 : 1) : 0;

async function admin(target, action) {
  const url = `${base}/admin/targets/${target}/breaker`;
  const headers = { "content-type": "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  const r = await fetch(url, { method: "POST", headers, body: JSON.stringify({ action }) });
  if (!r.ok) throw new Error(`POST ${url} ${action}: ${r.status} ${await r.text()}`);
}

const userDataDir = mkdtempSync(path.join(tmpdir(), "switchyard-chromium-"));
const problems = [];
let context;
try {
  const status = await (await fetch(`${base}/admin/status`)).json();
  const targets = status.targets.map((t) => t.target);
  if (targets.length < 2) throw new Error(`expected at least two targets, /admin/status has ${targets}`);
  step(`targets ${targets.join(", ")}`);

  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(10_000);
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    // The browser logs the 401 (and, for the client key, the 403) that make the page ask for
    // the key (counted as `prompts`).
    if (key && m.text().includes("status of 401")) return;
    if (clientKey && m.text().includes("status of 403")) return;
    problems.push(`console error: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  let prompts = 0;
  page.on("dialog", async (d) => {
    if (d.type() === "prompt" && key) {
      prompts++;
      await d.accept(prompts === 1 && clientKey ? clientKey : key);
    } else {
      problems.push(`unexpected ${d.type()}: ${d.message()}`);
      await d.dismiss();
    }
  });
  page.on("request", (r) => {
    if (!r.url().startsWith(base + "/")) problems.push(`request outside the gateway: ${r.url()}`);
  });

  const resp = await page.goto(`${base}/dashboard`);
  if (!resp || resp.status() !== 200) throw new Error(`GET /dashboard: ${resp && resp.status()}`);
  const row = (t) => page.locator(`#targets tr[data-target="${t}"]`);
  const badge = (t) => row(t).locator('[data-role="breaker"]');
  for (const t of targets) {
    await row(t).waitFor({ state: "visible" });
    await page.waitForFunction(
      (t) => document.querySelector(`#targets tr[data-target="${t}"] [data-role="breaker"]`)?.textContent === "closed",
      t,
    );
  }
  step("every target is shown, breakers closed");

  const victim = targets[0];
  await admin(victim, "open");
  await page.locator(`#targets tr[data-target="${victim}"][data-state="open"]`).waitFor();
  if ((await badge(victim).textContent()) !== "open") throw new Error("the badge does not say open");
  const colour = await badge(victim).evaluate((e) => getComputedStyle(e).backgroundColor);
  if (colour !== "rgb(248, 81, 73)") throw new Error(`an open breaker should be red, is ${colour}`);
  await page.locator("#events [data-kind=breaker]", { hasText: victim }).first().waitFor();
  step(`${victim} forced open through the admin API: the page shows it open, in red, and the event`);

  await row(victim).locator('button[data-action="close"]').click();
  await page.locator(`#targets tr[data-target="${victim}"][data-state="closed"]`).waitFor();
  await row(victim).locator('button[data-action="open"]').click();
  await page.locator(`#targets tr[data-target="${victim}"][data-state="open"]`).waitFor();
  if (prompts !== wantPrompts) throw new Error(`asked for the admin key ${prompts} times, not ${wantPrompts}`);
  step(`the page's close and open buttons work${key ? ` (the admin key asked for ${clientKey ? "again after a client key" : "once"})` : ""}`);

  // Let the charts gather a few seconds of history for the screenshot.
  await page.waitForTimeout(8000);
  await page.waitForFunction(() => document.querySelectorAll("#c-rate path").length > 0);
  if ((status.routes || []).some((r) => r.shares)) {
    // A weighted or adaptive route: its shares are charted, and each target's is in its row.
    await page.waitForFunction(() => !document.getElementById("s-share").hidden &&
      document.querySelectorAll("#c-share path").length > 0);
    const cell = await row(targets[1]).locator("td").nth(1).textContent();
    if (!/\d+%/.test(cell)) throw new Error(`the route cell should give the share, says ${cell}`);
    step(`the shares are charted; ${targets[1]}'s route cell says ${cell}`);
  }
  if (process.env.SWITCHYARD_SESSION) {
    // The session view: one conversation's turns, in order, read from the audit log.
    const session = process.env.SWITCHYARD_SESSION;
    await page.fill("#session-key", session);
    await page.click('#session-form button[type="submit"]');
    await page.waitForFunction(() => document.querySelectorAll("#session-turns tbody tr").length >= 3);
    const summary = await page.locator("#session-summary").textContent();
    if (!summary.startsWith(`session ${session}: `)) throw new Error(`session summary: ${summary}`);
    const first = await page.locator("#session-turns tbody tr").first().locator("td").first().textContent();
    if (first !== "1") throw new Error(`the turns are numbered from 1, the first says ${first}`);
    step(`the session view lists ${session}'s turns: ${summary}`);
  }
  mkdirSync(path.dirname(shot), { recursive: true });
  await page.screenshot({ path: shot, fullPage: true });
  await admin(victim, "reset");
  if (problems.length) throw new Error(problems.join("\n"));
  console.log(`screenshot: ${shot}`);
  step("ok");
} catch (e) {
  console.error(`dashboard test FAILED: ${e.message}`);
  for (const p of problems) console.error(`  ${p}`);
  process.exitCode = 1;
} finally {
  if (context) await context.close().catch(() => {});
  rmSync(userDataDir, { recursive: true, force: true });
}
