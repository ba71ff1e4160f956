// A wfm server for the SDK test: built from this repository, started with
// its own private PostgreSQL in a temporary folder, stopped and removed at
// the end. Every wait is bounded.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";

const run = promisify(execFile);

/** A running server. */
export interface Server {
  /** The management listener, such as http://127.0.0.1:41234. */
  mgmt: string;
  /** The device API listener (plain HTTP, development header identity). */
  device: string;
  /** The bootstrap admin token. */
  token: string;
  /** Stops the server (SIGTERM, then SIGKILL after 30 s) and removes its folder. */
  stop(): Promise<void>;
}

/** The repository root: $WFM_REPO, else two folders above sdk/ts (where npm runs the test). */
function repoRoot(): string {
  return process.env["WFM_REPO"] ?? resolve(process.cwd(), "..", "..");
}

/**
 * startServer builds cmd/wfm (unless $WFM_BIN names a binary) and starts it
 * on free loopback ports, with a private PostgreSQL in a temporary folder
 * (no DATABASE_URL), an admin token file of its own, the management rate
 * limit lifted, and the device API in its development header-identity mode
 * (plain HTTP, the client named by X-WFM-Client-ID) so that the test can act
 * as a device agent without client certificates.
 */
export async function startServer(extraArgs: string[] = []): Promise<Server> {
  const dir = await mkdtemp(join(tmpdir(), "wfm-sdk-ts-"));
  // As root the private PostgreSQL runs as the OS user postgres, which must
  // be able to enter the folder.
  await chmod(dir, 0o755);
  let child: ChildProcess | undefined;
  const cleanup = async () => {
    if (child !== undefined) {
      await stopChild(child);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    let bin = process.env["WFM_BIN"];
    if (bin === undefined || bin === "") {
      bin = join(dir, "wfm");
      await run("go", ["build", "-o", bin, "./cmd/wfm"], { cwd: repoRoot(), timeout: 600_000 });
    }
    const token = randomBytes(24).toString("hex");
    const tokenFile = join(dir, "admin-token");
    await writeFile(tokenFile, token + "\n", { mode: 0o600 });
    // Without DATABASE_URL the server starts its own PostgreSQL.
    const env = { ...process.env };
    delete env["DATABASE_URL"];
    child = spawn(
      bin,
      [
        "-listen", "127.0.0.1:0", "-device-listen", "127.0.0.1:0",
        "-data-dir", join(dir, "data"), "-admin-token-file", tokenFile,
        "-dev-header-identity", "-mgmt-rate", "0", "-log-level", "warn",
        ...extraArgs,
      ],
      { env, stdio: ["ignore", "pipe", "pipe"] },
    );
    const started = child;
    // Killed with the test process, whether it exits or is stopped by a
    // signal (the test runner's timeout); its PostgreSQL dies with it.
    const killOnExit = () => started.kill("SIGKILL");
    const killOnSignal = (signal: NodeJS.Signals) => {
      const code = signal === "SIGINT" ? 130 : 143;
      const exit = () => {
        rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
        process.exit(code);
      };
      started.once("exit", exit);
      started.kill("SIGKILL");
      setTimeout(exit, 5_000).unref();
    };
    process.once("exit", killOnExit);
    process.once("SIGINT", killOnSignal);
    process.once("SIGTERM", killOnSignal);
    started.once("exit", () => {
      process.removeListener("exit", killOnExit);
      process.removeListener("SIGINT", killOnSignal);
      process.removeListener("SIGTERM", killOnSignal);
    });
    let log = "";
    started.stderr?.on("data", (b: Buffer) => {
      log = (log + b.toString()).slice(-8000);
    });
    const addrs = await new Promise<{ mgmt: string; device: string }>((ok, fail) => {
      let mgmt = "";
      const timer = setTimeout(() => fail(new Error(`wfm did not start within 120 s; its log:\n${log}`)), 120_000);
      started.once("exit", (code) => {
        clearTimeout(timer);
        fail(new Error(`wfm exited at start (${code}); its log:\n${log}`));
      });
      const lines = createInterface({ input: started.stdout! });
      lines.on("line", (line) => {
        const m = /wfm listening on (http:\/\/\S+)/.exec(line);
        if (m?.[1] !== undefined) {
          mgmt = m[1];
        }
        const d = /device API \(Margo\) on (http:\/\/[^/\s]+)/.exec(line);
        if (d?.[1] !== undefined && mgmt !== "") {
          clearTimeout(timer);
          ok({ mgmt, device: d[1] });
        }
      });
    });
    return { ...addrs, token, stop: cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** stopChild ends the server gracefully, killing it after 30 s. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return;
  }
  const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  await exited;
  clearTimeout(timer);
}
