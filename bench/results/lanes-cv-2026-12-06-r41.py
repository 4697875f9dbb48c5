"""Round 41's experiment (not adopted): max_context_lanes chosen by the held-out workload error instead of the fit's
training error. Each recording's calibration rows refitted both ways (bench.mixed_pricing.refit) and validated (free
simulation). Run from the repository root as `python bench/results/lanes-cv-2026-12-06-r41.py OUT.json` (ROOT below
is the repository; it ran in two parts, the second skipping the recordings the first had done, /tmp/lanes_done.txt:
bench/results/lanes-cv-2026-12-06-r41.json holds both parts' figures, parsed from their printed lines)."""
import json, sys, tempfile, glob
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]; sys.path.insert(0, str(ROOT))
from unittest import mock
from bench.governor_eval import figures
from bench import mixed_pricing as MP
from pagesim.live_targets import STEP_MAPE
CANDIDATES = (23, 32, 45, 64, 91, 128)

def refit_lanes(rows, profile, source, lanes):
    from pagesim.cost import profile as P
    orig = P.fit_profile
    def fp(*a, **kw):
        if lanes is not None: kw['lanes'] = (lanes,)
        return orig(*a, **kw)
    with mock.patch.object(P, 'fit_profile', fp):
        return MP.refit(rows, profile, source)

def one(rec, tmp):
    import pandas as pd
    from pagesim.validate import validate
    rows = pd.read_csv(rec['rows'])
    name = rec['dir'].name
    now_model, now_rep = refit_lanes(rows, rec['profile'], rec['source'], None)
    held = {}
    for k in CANDIDATES:
        _, rep = refit_lanes(rows, rec['profile'], rec['source'], k)
        held[k] = rep['mape']
    best = min(held, key=held.get)
    entry = {'lanes_now': now_model.max_context_lanes, 'lanes_cv': best, 'held_out': held, 'held_now': now_rep['mape']}
    forms = {'now': now_model}
    if best != now_model.max_context_lanes:
        forms['cv'] = refit_lanes(rows, rec['profile'], rec['source'], best)[0]
    for form, model in forms.items():
        path = Path(tmp) / f'{name}-{form}.json'; model.to_json(path)
        rep = validate(str(rec['dir']), str(path), out=str(Path(tmp) / f'{name}-{form}'), ensemble=0)
        entry[form] = {**figures(rep), 'step_mape_met': rep['step_level']['mape'] <= STEP_MAPE}
    if 'cv' not in entry: entry['cv'] = entry['now']
    return name, entry

def main():
    names = sorted({Path(d).name for d in glob.glob(str(ROOT/'results/live/*'))})
    done = set(open('/tmp/lanes_done.txt').read().split()) if Path('/tmp/lanes_done.txt').exists() else set()
    recs = [r for r in MP.recordings(names) if r['dir'].name not in done]
    tmp = tempfile.mkdtemp(prefix='lanes-eval-')
    res = {}
    with ProcessPoolExecutor(2) as pool:
        for name, e in pool.map(one, recs, [tmp]*len(recs)):
            res[name] = e
            a, b = e['now'], e['cv']
            print(f"{name:38s} lanes {e['lanes_now']}->{e['lanes_cv']} held {e['held_now']:.4f} step {a['step_mape']:.2%}->{b['step_mape']:.2%} mk {a['makespan']:+.2%}->{b['makespan']:+.2%} pct {a['percentiles_met']}->{b['percentiles_met']} kinds {a['kinds_met']}->{b['kinds_met']}", flush=True)
    met = {f: {k: sum(e[f][k] for e in res.values()) for k in ('percentiles_met','kinds_met','makespan_met','step_mape_met')} for f in ('now','cv')}
    for f in ('now','cv'):
        met[f]['every'] = sum(all(e[f][k] for k in ('percentiles_met','kinds_met','makespan_met','step_mape_met')) for e in res.values())
        met[f]['mean_step_mape'] = sum(e[f]['step_mape'] for e in res.values())/len(res)
    print(json.dumps(met))
    Path(sys.argv[1]).write_text(json.dumps({'runs': res, 'met': met, 'n': len(res)}, indent=1, default=str))

if __name__ == '__main__':
    main()
