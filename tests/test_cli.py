import subprocess
import sys


def test_demo_without_model_prints_table(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rehearsal_gym.cli",
            "demo",
            "--no-model",
            "--tasks",
            "5",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "| env | tasks | oracle | random |" in out.stdout
    assert "| Retail-v0 | 5 | 100.0% |" in out.stdout
    assert (tmp_path / "demo.csv").read_text().startswith("env,tasks,oracle,random")


def test_cli_rejects_bad_numbers():
    out = subprocess.run(
        [sys.executable, "-m", "rehearsal_gym.cli", "demo", "--tasks", "0"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "--tasks must be >= 1" in out.stderr
