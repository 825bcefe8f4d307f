"""`agent eval`: whether a model gets file work done through the agent, measured by the end
state of tasks run in fresh temporary projects (docs/eval.md).

tasks.py reads task files (the built-in suite is suite/*.yaml), runner.py runs one task
through the real agent loop, checks.py judges its end state and answer, oracle.py is the
scripted model that plays each task's reference solution (`--oracle`), and results.py
holds the results, their JSON and the pass rates with their Wilson intervals. Nothing here
prints: the command (cli/commands/eval.py) and its view (cli/ui/eval_view.py) do.
"""
