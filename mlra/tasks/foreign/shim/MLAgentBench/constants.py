"""MLRC-Bench's published baselines (its MLAgentBench/constants.py), for task code that
reads them: runtimes in seconds, scores in each task's own metric."""

import os

ALL_BASE_RUNTIME = {
    "base-competition": {"dev": 100, "test": 100},
    "llm-merging": {"dev": 3338.013678, "test": 2428.072219},
    "backdoor-trigger-recovery": {"dev": 597.5532175, "test": 498.1251627},
    "perception_temporal_action_loc": {"dev": 1238.63, "test": 361.45},
    "machine_unlearning": {"dev": 353.8617296, "test": None},
    "meta-learning": {"dev": 1631.955898, "test": 7615.067012},
    "erasing_invisible_watermarks": {"dev": 158.2858313, "test": 626.034725},
    "product-recommendation": {"dev": 262.0930183, "test": 260.7098073},
}

ALL_BASE_PERFORMANCE = {
    "base-competition": {"dev": 0.5, "test": 0.5},
    "llm-merging": {"dev": 0.727136371, "test": 0.4933333333},
    "backdoor-trigger-recovery": {"dev": 3.758409347, "test": 9.368725447},
    "perception_temporal_action_loc": {"dev": 0.2370039379, "test": 0.1263531695},
    "machine_unlearning": {"dev": 0.05389313916, "test": 0.06085605833},
    "meta-learning": {"dev": 0.1821651453, "test": 0.1727912574},
    "erasing_invisible_watermarks": {"dev": -1.00034643, "test": -1.001120229},
    "product-recommendation": {"dev": 0.08035839265, "test": 0.08039049179},
}

MLR_BENCH_DIR = os.getenv("MLR_BENCH_DIR", os.path.dirname(os.path.dirname(__file__)))
