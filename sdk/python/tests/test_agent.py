"""The agent loop against a scripted model server on loopback (real HTTP,
deterministic replies) and a real daemon: self-correction, commits, and every
way a model can fail the loop."""

import asyncio
import os
import tempfile
import time
import unittest
from typing import Any, Dict, Iterator
from unittest import mock

from . import _env

_env.setup()

import dry_exec  # noqa: E402
from dry_exec import Agent, Environment, ModelConfig, ModelNotConfigured  # noqa: E402
from dry_exec.testing import ScriptedModel, call  # noqa: E402

MODEL_VARS = [k for k in os.environ if k.startswith(("OPENAI_", "ANTHROPIC_", "DRYEXEC_OPENAI_", "DRYEXEC_ANTHROPIC_"))]


def no_model_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MODEL_VARS}
    for k in ("DRYEXEC_AGENT_PROVIDER", "DRYEXEC_MODEL", "DRYEXEC_MODEL_TIMEOUT"):
        env.pop(k, None)
    return env


class AgentLoop(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(dir=_env._ROOT)

    def agent(self, m: ScriptedModel, api: str = "openai", **kw: Any) -> Agent:
        env = no_model_env()
        env.update(m.env(api))
        kw.setdefault("cwd", self.dir)
        with mock.patch.dict(os.environ, env, clear=True):
            cfg = ModelConfig.from_env()
        return Agent(task="write the report", model=cfg, **kw)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def test_self_corrects_then_commits(self) -> None:
        # The model's second turn depends on what the loop told it about the
        # first trial: it failed (review), so the model fixes the command.
        def fix(req: Any) -> Dict[str, Any]:
            r = req.last_result()
            assert r["decision"]["choice"] == "review", r
            assert r["exit_code"] != 0 and not r["committed"], r
            return call("run_trial", command="mkdir -p out && echo ok > out/report.txt", reason="create out/ first")

        for api in ("openai", "anthropic"):
            with self.subTest(api=api):
                self.dir = tempfile.mkdtemp(dir=_env._ROOT)
                steps = []
                with ScriptedModel([call("run_trial", command="echo ok > out/report.txt"), fix,
                                    call("finish", success=True, summary="report written")]) as m:
                    res = self.agent(m, api, on_step=steps.append).run_sync()
                self.assertEqual(res.stop_reason, "done", res.error)
                self.assertTrue(res.success)
                self.assertEqual(res.trials_conducted, 2)
                self.assertTrue(res.committed)
                trials = [s for s in res.transcript if s.kind == "trial"]
                self.assertEqual([s.decision.choice for s in trials], ["review", "auto_commit"])
                self.assertEqual([s.committed for s in trials], [False, True])
                for s in trials:
                    self.assertTrue(s.trial_id.startswith("tr_") or s.trial_id, s)
                    self.assertTrue(s.receipt.signature and s.receipt.delta_sha256, s)
                self.assertEqual(steps, res.steps, "on_step saw every step as it happened")
                with open(self.path("out/report.txt")) as f:
                    self.assertEqual(f.read(), "ok\n")
                self.assertEqual(res.summary, "report written")
                # The tools went out in the API's own shape.
                self.assertEqual(m.requests[0].api, api)
                tools = m.requests[0].body["tools"]
                names = [t["function"]["name"] if api == "openai" else t["name"] for t in tools]
                self.assertEqual(names, ["run_trial", "finish"])

    def test_block_is_never_committed(self) -> None:
        env = Environment(denied_mutation_targets=["**/secrets/**"])
        with ScriptedModel([call("run_trial", command="mkdir -p secrets && echo k > secrets/key"),
                            call("finish", success=True)]) as m:
            res = self.agent(m, environment=env).run_sync()
        self.assertEqual(res.trials_conducted, 1)
        self.assertEqual(res.steps[0].decision.choice, "block")
        self.assertFalse(res.committed)
        self.assertFalse(res.success, "a model that claims success over a block does not succeed")
        self.assertFalse(os.path.exists(self.path("secrets")))
        with ScriptedModel([call("run_trial", command="mkdir -p secrets && echo k > secrets/key"),
                            call("finish", success=True)]) as m:
            res = self.agent(m, environment=env, commit="never").run_sync()
        self.assertFalse(res.success, "nor when nothing is committed anyway")

    def test_commit_modes(self) -> None:
        seen = []

        def refuse(d: dry_exec.StateDelta) -> bool:
            seen.append(d.trial_id)
            return False

        cases = [("never", None, False), ("approve", refuse, False), ("approve", lambda d: True, True)]
        for mode, approve, committed in cases:
            with self.subTest(mode=mode, committed=committed):
                self.dir = tempfile.mkdtemp(dir=_env._ROOT)
                with ScriptedModel([call("run_trial", command="echo x > a.txt"), call("finish", success=True)]) as m:
                    res = self.agent(m, commit=mode, approve=approve).run_sync()
                self.assertEqual(res.committed, committed)
                self.assertEqual(os.path.exists(self.path("a.txt")), committed)
                self.assertEqual(res.success, mode == "never" or committed)
        self.assertEqual(len(seen), 1, "approve was asked once, with the delta")

    def test_malformed_tool_calls(self) -> None:
        # Not JSON, not an object, an unknown tool, no command: each goes
        # back to the model as an error; three in a row end the loop.
        with ScriptedModel([call("run_trial", "{not json"), call("run_trial", "[1]"), call("rm_rf", path="/"),
                            call("run_trial", command="  ")]) as m:
            res = self.agent(m).run_sync()
        self.assertEqual(res.stop_reason, "malformed")
        self.assertEqual(res.trials_conducted, 0)
        self.assertEqual([s.kind for s in res.steps], ["malformed"] * 3 + ["error"])
        self.assertIn("not JSON", res.steps[0].error)
        errs = m.requests[1].tool_results()
        self.assertIn("not JSON", errs[0]["error"])
        # A malformed call followed by a good one recovers.
        with ScriptedModel([call("run_trial", "{"), call("run_trial", command="true"),
                            call("finish", success=True)]) as m:
            res = self.agent(m).run_sync()
        self.assertEqual((res.stop_reason, res.success, res.trials_conducted), ("done", True, 1))
        # A good call resets the count: 2 bad, 1 good, 2 bad is not 3 in a row.
        with ScriptedModel([call("run_trial", "{"), call("run_trial", "{"), call("run_trial", command="true"),
                            call("run_trial", "{"), call("run_trial", "{"), call("finish", success=True)]) as m:
            res = self.agent(m).run_sync()
        self.assertEqual((res.stop_reason, res.success), ("done", True))

    def test_refusal(self) -> None:
        for api in ("openai", "anthropic"):
            with self.subTest(api=api):
                with ScriptedModel([{"refusal": "I can't help with that."}]) as m:
                    res = self.agent(m, api).run_sync()
                self.assertEqual(res.stop_reason, "refused")
                self.assertFalse(res.success)
                self.assertEqual(res.summary, "I can't help with that.")
                self.assertEqual(res.trials_conducted, 0)

    def test_model_timeout_and_http_errors(self) -> None:
        with ScriptedModel([{"hang": True}]) as m:
            a = self.agent(m)
            a._backend().cfg.timeout = 0.3  # type: ignore[attr-defined]
            t0 = time.monotonic()
            res = a.run_sync()
        self.assertEqual(res.stop_reason, "model_timeout", res.error)
        self.assertLess(time.monotonic() - t0, 10)
        # The loop's own deadline bounds a model request too.
        with ScriptedModel([{"hang": True}]) as m:
            t0 = time.monotonic()
            res = self.agent(m, timeout=0.5).run_sync()
        self.assertEqual(res.stop_reason, "model_timeout", res.error)
        self.assertLess(time.monotonic() - t0, 10)
        for turn, want in [({"status": 500, "body": "overloaded"}, "HTTP 500"), ({"raw": "<html>"}, "not JSON"),
                           ({"raw": "{\"choices\": []}"}, "choices[0]")]:
            with self.subTest(turn=turn):
                with ScriptedModel([turn]) as m:
                    res = self.agent(m).run_sync()
                self.assertEqual(res.stop_reason, "model_error")
                self.assertIn(want, res.error)
                self.assertFalse(res.success)

    def test_model_that_never_stops(self) -> None:
        def forever() -> Iterator[Dict[str, Any]]:
            while True:
                yield call("run_trial", command="true")

        with ScriptedModel(forever()) as m:
            res = self.agent(m, max_trials=3).run_sync()
        self.assertEqual((res.stop_reason, res.trials_conducted), ("max_trials", 3))
        # The last trial's result told the model to finish.
        self.assertIn("last trial", m.requests[3].last_result()["note"])

        def chatter() -> Iterator[Dict[str, Any]]:
            while True:
                yield dict(call("run_trial", "{"), tokens=1000)

        with ScriptedModel(chatter()) as m:
            res = self.agent(m, max_tokens=2500, max_malformed=100).run_sync()
        self.assertEqual(res.stop_reason, "max_tokens")
        self.assertEqual(res.tokens_used, 3000)
        self.assertEqual(len(m.requests), 3)

    def test_no_model_configured(self) -> None:
        with mock.patch.dict(os.environ, no_model_env(), clear=True):
            with self.assertRaises(ModelNotConfigured) as cm:
                Agent(task="anything").run_sync()
            with self.assertRaises(ModelNotConfigured):
                asyncio.run(Agent(task="anything").run())
        msg = str(cm.exception)
        for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DRYEXEC_"):
            self.assertIn(var, msg)
        self.assertIsInstance(cm.exception, dry_exec.DryExecError)

    def test_env_names(self) -> None:
        cases = [
            ({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, ("openai", "http://127.0.0.1:1/v1", "")),
            ({"OPENAI_API_KEY": "k"}, ("openai", "https://api.openai.com/v1", "gpt-4o-mini")),
            ({"OPENAI_API_KEY": "k", "OPENAI_MODEL": "m", "DRYEXEC_MODEL": "d"}, ("openai", "https://api.openai.com/v1", "d")),
            ({"OPENAI_BASE_URL": "http://a/v1", "DRYEXEC_OPENAI_BASE_URL": "http://b/v1"}, ("openai", "http://b/v1", "")),
            ({"ANTHROPIC_API_KEY": "k"}, ("anthropic", "https://api.anthropic.com", "claude-sonnet-4-5")),
            ({"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o", "DRYEXEC_AGENT_PROVIDER": "anthropic",
              "ANTHROPIC_MODEL": "c"}, ("anthropic", "https://api.anthropic.com", "c")),
        ]
        for env, want in cases:
            with self.subTest(env=env):
                c = ModelConfig.from_env(env)
                self.assertEqual((c.provider, c.base_url, c.model), want)
        for env, want in [({"DRYEXEC_AGENT_PROVIDER": "anthropic"}, "ANTHROPIC_API_KEY"),
                          ({"DRYEXEC_AGENT_PROVIDER": "gpt"}, "openai or anthropic"),
                          ({"OPENAI_BASE_URL": "ftp://x"}, "http"),
                          ({"OPENAI_BASE_URL": "http://x", "DRYEXEC_MODEL_TIMEOUT": "soon"}, "DRYEXEC_MODEL_TIMEOUT")]:
            with self.subTest(env=env):
                with self.assertRaisesRegex(ModelNotConfigured, want):
                    ModelConfig.from_env(env)

    def test_local_server_model_listed(self) -> None:
        # No model named for a local OpenAI-compatible server: the first it lists.
        with ScriptedModel([call("finish", success=True)], model="qwen-local") as m:
            cfg = ModelConfig.from_env({"OPENAI_BASE_URL": m.openai_base})
            res = Agent(task="nothing to do", model=cfg, cwd=self.dir).run_sync()
        self.assertEqual((res.stop_reason, res.success), ("done", True))
        self.assertEqual(m.requests[0].body["model"], "qwen-local")
        # A server that lists no model gets the default name.
        with ScriptedModel([call("finish", success=True)], model="") as m:
            res = Agent(task="x", model=ModelConfig.from_env({"OPENAI_BASE_URL": m.openai_base}), cwd=self.dir).run_sync()
        self.assertEqual((res.success, m.requests[0].body["model"]), (True, "gpt-4o-mini"))

    def test_bad_arguments(self) -> None:
        for kw in [dict(task=""), dict(task="x", commit="yolo"), dict(task="x", commit="approve"),
                   dict(task="x", max_trials=0), dict(task="x", timeout=-1)]:
            with self.subTest(kw=kw):
                with self.assertRaises(dry_exec.BadRequest):
                    Agent(**kw)


if __name__ == "__main__":
    unittest.main()
