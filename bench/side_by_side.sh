# Helpers the side-by-side benchmark scripts share; source it, don't run it.

# The median of the numbers on stdin, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# field NAME: the value of NAME in the JSON object on the last line of stdin (what `kiln train
# --json`, torch_train.py and the other benchmark programs print).
field() {
  python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"
}
