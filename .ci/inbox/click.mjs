// Drives the approval inbox in headless Chromium, as a person would: log in with the token,
// take a screenshot, press "Approve" on the pending call, and check that the inbox is empty
// afterwards. Usage: node click.mjs <base url> <token> <screenshot.png>
import puppeteer from "puppeteer-core";

const [base, token, screenshot] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
const browser = await puppeteer.launch({
  executablePath,
  headless: true,
  // Root in CI containers cannot use the sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  const response = await page.goto(`${base}/inbox?token=${encodeURIComponent(token)}`, {
    waitUntil: "load",
  });
  if (!response || response.status() !== 200) {
    throw new Error(`the inbox answered ${response && response.status()}`);
  }
  const before = await page.content();
  if (!before.includes("call_1")) throw new Error(`no pending call on the page:\n${before}`);
  await page.screenshot({ path: screenshot, fullPage: true });
  await Promise.all([
    page.waitForNavigation({ waitUntil: "load" }),
    page.click('section[data-call="call_1"] button[name="approve"]'),
  ]);
  const after = await page.content();
  if (!after.includes("No tool call waits for approval.")) {
    throw new Error(`the call is still pending after approving:\n${after}`);
  }
  console.log("APPROVED");
} finally {
  await browser.close();
}
