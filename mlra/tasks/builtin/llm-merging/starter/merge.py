"""Average the parameters of expert models that share one architecture.

    python merge.py --out submission MODEL_A MODEL_B [MODEL_C ...]

The first model gives the architecture and the tokenizer. A starting point for
better merges (task arithmetic, TIES, DARE, per-layer weights...).
"""

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--out", default="submission")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)

    merged = AutoModelForCausalLM.from_pretrained(args.models[0], torch_dtype=torch.float32)
    state = {k: v.clone() for k, v in merged.state_dict().items()}
    for name in args.models[1:]:
        other = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.float32).state_dict()
        for key in state:
            state[key] += other[key]
        del other
    for key in state:
        state[key] /= len(args.models)
    merged.load_state_dict(state)
    merged.to(dtype).save_pretrained(args.out)
    AutoTokenizer.from_pretrained(args.models[0]).save_pretrained(args.out)


if __name__ == "__main__":
    main()
