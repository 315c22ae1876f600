"""How the policy learns, apart from how a run is driven: GRPO's losses and advantages (`grpo`), the policy
update over a step's episodes (`update`), per-token log-probs (`logprobs`), and the SFT warm-up in the JSON
harness (`sft`) and in a model's native tool format (`sft_native`). Torch code that knows no store, UI or
command line (an import-linter contract holds it); the trainer (workbench/trainer.py) calls it.
"""
