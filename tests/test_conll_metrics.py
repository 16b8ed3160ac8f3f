"""CoNLL-2012 coreference metrics (`score_coreference`) against the reference scorer.

* Every test case of the reference scorer's own suite (conll/reference-coreference-scorers v8.01,
  test/CorefMetricTestConfig.pm, transcribed into tests/fixtures/reference_scorer/expected.json by
  extract_expected.py there): every metric it states, recall / precision / F1 within the reference suite's own
  tolerance, plus LEA for the cases coval's unittests.py states.
* Random documents (with repeated mentions) written as CoNLL files and scored by a line-by-line Python port of the
  reference scorer's Perl (reading included): the vectorised counts equal the port's.
* Hand-computed small cases, the options and the errors; LitBank scored against itself.
"""

import json
import random
import re
import time
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from hf_entity_models.tasks.coreference import CONLL_METRICS, score_coreference
from hf_entity_models.tasks.coreference.conll import CorefDocument, read_conll_coreference, write_conll_coreference
from hf_entity_models.tasks.coreference.conll_metrics import MAX_REPEATED_RESPONSE_MENTIONS

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "reference_scorer"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))
# test/test.pl of the reference scorer passes a case when |recall| + |precision| + |F1| differences sum below 1e-4;
# its expected values are fractions (ours are percent).
TOLERANCE = 1e-4
REFERENCE_METRICS = ("muc", "bcub", "ceafm", "ceafe", "blanc")


@lru_cache(maxsize=None)
def scored(key: str, response: str) -> dict:
    # The suite's responses rename the words of invented mentions ("jnk" in the key, "x" in the response): scored by
    # word position, as the reference scorer does.
    return score_coreference(FIXTURES / key, FIXTURES / response, check_words=False)


def reference_values() -> list:
    return [
        pytest.param(case, metric, id=f"{case['id']}-{metric}")
        for case in EXPECTED["cases"]
        for metric in case["expected"]
    ]


# ------------------------------------------------------------------------------------------------ reference cases
@pytest.mark.parametrize(("case", "metric"), reference_values())
def test_every_reference_test_case(case, metric):
    scores = scored(case["key"], case["response"])[metric]
    actual = [scores["recall"] / 100, scores["precision"] / 100, scores["f1"] / 100]
    expected = case["expected"][metric]
    assert sum(abs(a - e) for a, e in zip(actual, expected)) < TOLERANCE, (
        f"{case['id']} {metric}: expected (R, P, F1) = {expected} ({case['expressions'][metric]}), got {actual}"
    )


def test_the_transcription_holds_every_case_of_the_reference_suite():
    config = (FIXTURES / "CorefMetricTestConfig.pm").read_text(encoding="utf-8")
    assert len(EXPECTED["cases"]) == len(re.findall(r"\bid\s*=>", config)) == 36
    counts = {metric: sum(metric in case["expected"] for case in EXPECTED["cases"]) for metric in CONLL_METRICS}
    # Every metric line of the .pm that is not commented out (e.g. A10-A13 comment out CEAF), and coval's LEA cases.
    assert counts == {"muc": 28, "bcub": 16, "ceafm": 10, "ceafe": 10, "blanc": 27, "lea": 34}
    for case in EXPECTED["cases"]:
        assert (FIXTURES / case["key"]).is_file() and (FIXTURES / case["response"]).is_file()


def test_conll_f1_is_the_mean_of_muc_b_cubed_and_ceaf_e():
    scores = scored("TC-A.key", "TC-A-4.response")
    assert scores["conll_f1"] == pytest.approx((scores["muc"]["f1"] + scores["bcub"]["f1"] + scores["ceafe"]["f1"]) / 3)
    assert set(scores) == set(CONLL_METRICS) | {"conll_f1"}
    assert all(set(scores[metric]) == {"recall", "precision", "f1"} for metric in CONLL_METRICS)


# ------------------------------------------------------------------------------------------------ the Perl, ported
def perl_read(path: Path) -> dict[str, list[list[tuple[int, int]]]]:
    """GetCoreference of lib/CorScorer.pm: the last tab-separated column (trailing empty ones dropped, as Perl's
    split does); per cell, double antecedents removed, then one-word mentions, opens, closes, each found by a regex
    and removed one at a time; entities numbered by first sight of their id (GetIndex)."""
    documents, name = {}, None
    for line in path.read_text(encoding="utf-8").splitlines():
        begin = re.match(r"^#\s*begin document (.*?)$", line)
        if begin:
            name, entities, index, half, number = begin.group(1), [], {}, {}, 0
            continue
        if re.search(r"#\s*end document", line):
            assert not any(half.values())
            documents[name] = entities
            continue
        if not line.strip():
            continue
        columns = line.split("\t")
        while columns and columns[-1] == "":
            columns.pop()
        cell = columns[-1]

        def entity(cluster: str) -> int:
            if cluster not in index:
                index[cluster] = len(index)
                entities.append([])
            return index[cluster]

        if cell != "_":
            cell = re.sub(r"\((\d+\+\d)\)", "", cell)
            for pattern in (r"\((\d+)\)", r"\((\d+)", r"(\d+)\)"):
                while (match := re.search(pattern, cell)) is not None:
                    cell = cell[: match.start()] + cell[match.end() :]
                    e = entity(match.group(1))
                    if pattern == r"\((\d+)\)":
                        entities[e].append((number, number))
                    elif pattern == r"\((\d+)":
                        half.setdefault(e, []).append(number)
                    else:
                        entities[e].append((half[e].pop(), number))
        number += 1
    return documents


def perl_identify(keys, response):
    """IdentifMentions: returns kChains, rChains (MUC's, after adding missed key mentions as singletons and dropping
    invented singletons), kChainsOrig, rChainsOrig and the number of repeated response mentions."""
    ids, count = {}, 0
    for entity in keys:
        for mention in entity:
            ids[mention] = count  # a repeated key mention takes the later number, as in the Perl
            count += 1
    mapped, assigned, exact, repeated = {}, set(), 0, 0
    response = [list(entity) for entity in response]
    for entity in response:
        keep = []
        for mention in entity:
            if mention in mapped:
                repeated += 1
                continue
            if mention in ids and ids[mention] not in assigned:
                assigned.add(ids[mention])
                mapped[mention] = ids[mention]
                exact += 1
            keep.append(mention)
        entity[:] = keep
    response = [entity for entity in response if entity]
    for entity in response:
        for mention in entity:
            if mention not in mapped:
                mapped[mention] = count
                count += 1
    k_chains = [[ids[m] for m in entity] for entity in keys]
    r_chains = [[mapped[m] for m in entity] for entity in response]
    k_index, r_index = indexa(k_chains), indexa(r_chains)
    muc_response = [list(chain) for chain in r_chains]
    if len(ids) - exact > 0:
        for chain in k_chains:
            muc_response.extend([m] for m in chain if m not in r_index)
    if count - len(ids) > 0:
        for chain in muc_response:
            if len(chain) == 1 and chain[0] not in k_index:
                chain.clear()
    muc_response = [chain for chain in muc_response if chain]
    return k_chains, muc_response, k_chains, r_chains, repeated


def indexa(chains):
    return {m: i for i, chain in enumerate(chains) for m in chain}


def perl_muc(keys, response):
    k_index = indexa(keys)
    correct = 0
    for chain in response:
        for i in range(len(chain)):
            if any(
                chain[i] in k_index and chain[j] in k_index and k_index[chain[i]] == k_index[chain[j]]
                for j in range(i + 1, len(chain))
            ):
                correct += 1
    key_links = sum(len(chain) - 1 for chain in keys if chain)
    response_links = sum(len(chain) - 1 for chain in response if chain)
    return [correct, key_links, correct, response_links]


def perl_bcubed(keys, response):
    k_index = indexa(keys)
    recall = precision = 0.0
    for r_chain in response:
        for m in r_chain:
            k_chain = keys[k_index[m]] if m in k_index else []
            common = sum(1 for mr in r_chain if mr in k_chain)
            precision += common / len(r_chain)
            if k_chain:
                recall += common / len(k_chain)
    return [recall, sum(map(len, keys)), precision, sum(map(len, response))]


def perl_ceaf(keys, response, entity_based):
    columns = max(len(response), len(keys))
    cost = np.ones((len(keys), columns))
    for i, k_chain in enumerate(keys):
        for j, r_chain in enumerate(response):
            common = sum(1 for m in k_chain if m in r_chain)
            similarity = 2 * common / (len(k_chain) + len(r_chain)) if entity_based else common
            cost[i, j] = 1 - similarity
    total = 0.0
    if len(keys):
        rows, chosen = linear_sum_assignment(cost)
        total = float(np.sum(1 - cost[rows, chosen]))
    if entity_based:
        return [total, len(keys), total, len(response)]
    return [total, sum(map(len, keys)), total, sum(map(len, response))]


def perl_blanc(keys, response):
    def links(chains):
        coreference = {tuple(sorted(pair)) for chain in chains for pair in combinations(chain, 2)}
        non_coreference = {
            tuple(sorted((a, b))) for first, second in combinations(chains, 2) for a in first for b in second
        }
        return coreference, non_coreference

    key_c, key_n = links(keys)
    response_c, response_n = links(response)
    both_c, both_n = len(key_c & response_c), len(key_n & response_n)
    return [both_c, len(key_c), both_c, len(response_c), both_n, len(key_n), both_n, len(response_n)]


def coval_lea(clusters, others):
    """coval's lea(): recall with (key, response), precision with (response, key)."""
    other_index = indexa(others)
    numerator = 0.0
    for cluster in clusters:
        if len(cluster) == 1:
            all_links = 1
            common = int(cluster[0] in other_index and len(others[other_index[cluster[0]]]) == 1)
        else:
            all_links = len(cluster) * (len(cluster) - 1) / 2
            common = sum(
                1
                for i, m in enumerate(cluster)
                for m2 in cluster[i + 1 :]
                if m in other_index and m2 in other_index and other_index[m] == other_index[m2]
            )
        numerator += len(cluster) * common / all_links
    return numerator, sum(map(len, clusters))


def perl_counts(key_path: Path, response_path: Path) -> dict[str, np.ndarray]:
    keys, responses = perl_read(key_path), perl_read(response_path)
    totals = {name: 0 for name in CONLL_METRICS}
    for name, key_entities in keys.items():
        k_chains, muc_response, k_orig, r_orig, _ = perl_identify(key_entities, responses.get(name, []))
        recall, recall_den = coval_lea(k_orig, r_orig)
        precision, precision_den = coval_lea(r_orig, k_orig)
        counts = {
            "muc": perl_muc(k_chains, muc_response),
            "bcub": perl_bcubed(k_orig, r_orig),
            "ceafm": perl_ceaf(k_orig, r_orig, entity_based=False),
            "ceafe": perl_ceaf(k_orig, r_orig, entity_based=True),
            "blanc": perl_blanc(k_orig, r_orig),
            "lea": [recall, recall_den, precision, precision_den],
        }
        for metric, values in counts.items():
            totals[metric] = totals[metric] + np.asarray(values, dtype=float)
    return totals


def scores_from_counts(counts: dict[str, np.ndarray]) -> dict[str, list[float]]:
    def ratio(numerator, denominator):
        return numerator / denominator if denominator else 0.0

    def f1(recall, precision):
        return 2 * recall * precision / (recall + precision) if recall + precision else 0.0

    scores = {}
    for metric in CONLL_METRICS:
        if metric == "blanc":
            both_c, key_c, _, response_c, both_n, key_n, _, response_n = counts[metric]
            rc, pc = ratio(both_c, key_c), ratio(both_c, response_c)
            rn, pn = ratio(both_n, key_n), ratio(both_n, response_n)
            if key_c == 0 and key_n == 0:
                scores[metric] = [0.0, 0.0, 0.0]
            elif key_c == 0:
                scores[metric] = [rn, pn, f1(rn, pn)]
            elif key_n == 0:
                scores[metric] = [rc, pc, f1(rc, pc)]
            else:
                scores[metric] = [(rc + rn) / 2, (pc + pn) / 2, (f1(rc, pc) + f1(rn, pn)) / 2]
            continue
        recall_n, recall_d, precision_n, precision_d = counts[metric]
        recall, precision = ratio(recall_n, recall_d), ratio(precision_n, precision_d)
        scores[metric] = [recall, precision, f1(recall, precision)]
    return scores


def test_the_perl_port_passes_the_reference_suite_too():
    # The port is only a witness if it is right: it must pass the reference's own cases.
    for case in EXPECTED["cases"]:
        port = scores_from_counts(perl_counts(FIXTURES / case["key"], FIXTURES / case["response"]))
        for metric, expected in case["expected"].items():
            assert sum(abs(a - e) for a, e in zip(port[metric], expected)) < TOLERANCE, (case["id"], metric)


def random_document(rng: random.Random, name: str, num_words: int, base: CorefDocument | None = None) -> CorefDocument:
    """Random clusters; with ``base``, a response made from the key by dropping, moving, re-clustering and repeating
    mentions. Brackets must express it: no two mentions of one cluster cross or touch (``N)|(N``)."""
    if base is None:
        mentions = []
        for _ in range(rng.randint(0, 9)):
            start = rng.randrange(num_words)
            end = min(num_words - 1, start + rng.choice([0, 0, 1, 2]))
            mentions.append((start, end, rng.randint(0, 4)))
    else:
        mentions = []
        for start, end, cluster in base.mentions:
            choice = rng.random()
            if choice < 0.15:
                continue
            if choice < 0.3:
                cluster = rng.randint(0, 5)
            elif choice < 0.4:
                end = min(num_words - 1, end + 1)
            mentions.append((start, end, cluster))
            if rng.random() < 0.1:  # a repeated mention, in the same or another cluster
                mentions.append((start, end, rng.choice([cluster, rng.randint(0, 5)])))
        for _ in range(rng.randint(0, 3)):
            start = rng.randrange(num_words)
            mentions.append((start, min(num_words - 1, start + rng.choice([0, 1])), rng.randint(0, 6)))
    kept = []
    for mention in mentions:
        start, end, cluster = mention
        clash = any(
            c == cluster
            and (s, e) != (start, end)
            and (
                (s < start <= e < end)  # crossing
                or (start < s <= end < e)
                or (start < end and s < e and (e == start or end == s))  # "N)|(N", which the Perl misreads
            )
            for s, e, c in kept
        )
        if not clash:
            kept.append(mention)
    if base is not None:  # at most 3 repeated spans per response document (a call accepts 10 over its documents)
        seen, repeats, limited = set(), 0, []
        for start, end, cluster in kept:
            if (start, end) in seen:
                repeats += 1
                if repeats > 3:
                    continue
            seen.add((start, end))
            limited.append((start, end, cluster))
        kept = limited
    return CorefDocument(name, 0, [f"w{i}" for i in range(num_words)], kept)


@pytest.mark.parametrize("seed", range(4))
def test_random_documents_score_as_the_ported_perl_scores_them(tmp_path, seed):
    rng = random.Random(seed)
    keys, responses = [], []
    for number in range(30):
        num_words = rng.randint(1, 14)
        key = random_document(rng, f"doc{number}", num_words)
        keys.append(key)
        if rng.random() < 0.1:
            continue  # no response document: an empty response
        response = random_document(rng, f"doc{number}", num_words, base=key)
        responses.append(response)
    for index in range(0, len(keys), 3):  # a few documents per file, and repeats per call within the limit
        key_part = keys[index : index + 3]
        names = {document.name for document in key_part}
        response_part = [document for document in responses if document.name in names]
        key_file = write_conll_coreference(key_part, tmp_path / f"key{index}.conll")
        response_file = write_conll_coreference(response_part, tmp_path / f"response{index}.conll")
        port = scores_from_counts(perl_counts(key_file, response_file))
        ours = score_coreference(key_file, response_file)
        for metric in CONLL_METRICS:
            actual = [ours[metric][part] / 100 for part in ("recall", "precision", "f1")]
            assert actual == pytest.approx(port[metric], abs=1e-9), (index, metric, key_part, response_part)


# ------------------------------------------------------------------------------------------------ hand-computed cases
WORDS = ["Ann", "met", "Bo", ".", "She", "smiled", "at", "him", "and", "Cy"]


def doc(mentions, name="story", words=WORDS):
    return CorefDocument(name, 0, list(words), mentions)


def test_a_hand_computed_case():
    # key:      {Ann(0), She(4)}  {Bo(2), him(7)}  {Cy(9)}
    # response: {Ann(0), She(4), him(7)}  {and(8)}            (Bo and Cy missed, "and" invented)
    key = doc([(0, 0, 1), (4, 4, 1), (2, 2, 2), (7, 7, 2), (9, 9, 3)])
    response = doc([(0, 0, 7), (4, 4, 7), (7, 7, 7), (8, 8, 8)])
    scores = score_coreference(key, response)
    # MUC: key links 1 + 1 + 0 = 2; response links 2 + 0 = 2; correct: {Ann, She, him} falls into 2 key clusters:
    #   3 - 2 = 1. R = 1/2, P = 1/2.
    assert scores["muc"] == pytest.approx({"recall": 50.0, "precision": 50.0, "f1": 50.0})
    # B-cubed recall over the 5 key mentions: Ann 2/2, She 2/2, Bo 0, him 1/2, Cy 0 -> 2.5/5.
    #   precision over the 4 response mentions: Ann 2/3, She 2/3, him 1/3, and 0 -> (5/3)/4.
    assert scores["bcub"]["recall"] == pytest.approx(50.0)
    assert scores["bcub"]["precision"] == pytest.approx(100 * (5 / 3) / 4)
    # CEAF-m: best alignment {Ann,She}<->{Ann,She,him} (2 shared), nothing else shares: 2/5 recall, 2/4 precision.
    assert scores["ceafm"]["recall"] == pytest.approx(40.0) and scores["ceafm"]["precision"] == pytest.approx(50.0)
    # CEAF-e: phi4({Ann,She}, {Ann,She,him}) = 2*2/(2+3) = 0.8 beats phi4({Bo,him}, ...) = 2*1/5 = 0.4:
    #   recall 0.8/3 key clusters, precision 0.8/2 response clusters.
    assert scores["ceafe"]["recall"] == pytest.approx(80 / 3) and scores["ceafe"]["precision"] == pytest.approx(40.0)
    # BLANC: key coreference links {Ann-She, Bo-him} (2), non-coreference C(5,2) - 2 = 8;
    #   response coreference {Ann-She, Ann-him, She-him} (3), non-coreference C(4,2) - 3 = 3;
    #   common coreference {Ann-She} = 1; common non-coreference {Ann-and, She-and, him-and}: "and" is not in the
    #   key, so none; {Ann,She}-{him} pairs are non-coreference in the key but coreference in the response -> 0.
    #   Rc = 1/2, Pc = 1/3, Rn = 0/8, Pn = 0/3 -> R = 1/4, P = 1/6, F = (2*(1/2)(1/3)/(5/6) + 0)/2 = 0.2.
    assert scores["blanc"] == pytest.approx({"recall": 25.0, "precision": 100 / 6, "f1": 20.0})
    # LEA recall: {Ann,She} 2 * 1/1, {Bo,him} 2 * 0/1, {Cy} 1 * 0 (missed) -> 2/5.
    #   precision: {Ann,She,him} 3 * (1 link of 3), {and} 1 * 0 (not a key singleton) -> 1/4.
    assert scores["lea"]["recall"] == pytest.approx(40.0) and scores["lea"]["precision"] == pytest.approx(25.0)


def test_a_perfect_response_scores_100_and_an_empty_one_0():
    key = doc([(0, 0, 1), (4, 4, 1), (2, 2, 2), (7, 7, 2), (9, 9, 3)])
    perfect = score_coreference(key, doc([(0, 0, 5), (4, 4, 5), (2, 2, 6), (7, 7, 6), (9, 9, 4)]))
    assert all(perfect[metric] == {"recall": 100.0, "precision": 100.0, "f1": 100.0} for metric in CONLL_METRICS)
    empty = score_coreference(key, doc([]))
    assert all(empty[metric] == {"recall": 0.0, "precision": 0.0, "f1": 0.0} for metric in CONLL_METRICS)


def test_singletons_are_scored_unless_asked_not_to():
    # key {Ann, She} {Cy}; response {Ann, She} {and}: with singletons, Cy is missed and "and" invented;
    # without them both sides are just {Ann, She}.
    key = doc([(0, 0, 1), (4, 4, 1), (9, 9, 3)])
    response = doc([(0, 0, 1), (4, 4, 1), (8, 8, 2)])
    with_singletons = score_coreference(key, response)
    # B-cubed recall: Ann 1, She 1, Cy 0 -> 2/3; CEAF-e: {Ann,She} aligned (1), Cy unaligned -> recall 1/2.
    assert with_singletons["bcub"]["recall"] == pytest.approx(200 / 3)
    assert with_singletons["ceafe"]["recall"] == pytest.approx(50.0)
    assert with_singletons["muc"]["f1"] == 100.0  # MUC ignores singletons anyway
    without = score_coreference(key, response, keep_singletons=False)
    assert all(without[metric]["f1"] == 100.0 for metric in CONLL_METRICS)
    # A cluster whose mentions all have one span is a singleton too.
    assert score_coreference(doc([(0, 0, 1), (4, 4, 1)]), doc([(0, 0, 1), (0, 0, 1)]), keep_singletons=False)[
        "muc"
    ] == {"recall": 0.0, "precision": 0.0, "f1": 0.0}


def test_a_missing_response_document_is_an_empty_response():
    first = doc([(0, 0, 1), (4, 4, 1)], name="first")
    second = doc([(2, 2, 1), (7, 7, 1)], name="second")
    missing = score_coreference([first, second], [first])
    explicit = score_coreference([first, second], [first, doc([], name="second")])
    assert missing == explicit
    # MUC: one key link of two found; B-cubed recall 2/4.
    assert missing["muc"] == {"recall": 50.0, "precision": 100.0, "f1": pytest.approx(200 / 3)}
    assert missing["bcub"]["recall"] == 50.0
    # Numerators and denominators are summed over documents, not scores averaged: 1/2 of the links, not mean(1, 0).
    assert score_coreference([first, second], [first, second])["muc"]["recall"] == 100.0


def test_documents_are_matched_by_name_and_part_and_inputs_may_be_files_folders_or_documents(tmp_path):
    key = [doc([(0, 0, 1), (4, 4, 1)], name="a"), doc([(2, 2, 1), (7, 7, 1), (9, 9, 2)], name="b")]
    response = [doc([(2, 2, 3), (7, 7, 3)], name="b"), doc([(0, 0, 1), (4, 4, 2)], name="a")]
    (tmp_path / "key").mkdir()
    write_conll_coreference(key[:1], tmp_path / "key" / "a.conll")
    write_conll_coreference(key[1:], tmp_path / "key" / "b.conll")
    write_conll_coreference(response, tmp_path / "response.conll")
    expected = score_coreference(key, response)
    assert score_coreference(tmp_path / "key", tmp_path / "response.conll") == expected
    assert score_coreference([str(tmp_path / "key" / "a.conll"), tmp_path / "key" / "b.conll"], response) == expected
    assert score_coreference(tmp_path / "key", tuple(response)) == expected


def test_bad_input_raises_a_clear_error():
    key = doc([(0, 0, 1), (4, 4, 1)])
    with pytest.raises(ValueError, match=r"response document\(s\) have no key document: 'other' part 0"):
        score_coreference(key, [doc([], name="other")])
    with pytest.raises(ValueError, match=r"the key has 10 words .* but the response 3"):
        score_coreference(key, doc([], words=["Ann", "met", "Bo"]))
    with pytest.raises(ValueError, match="The key holds no document"):
        score_coreference([], key)
    with pytest.raises(ValueError, match="has document 'story' part 0 twice"):
        score_coreference([key, key], [])
    with pytest.raises(TypeError, match="CorefDocument objects"):
        score_coreference(key, [key, "file.conll"])
    with pytest.raises(TypeError, match="keep_singletons"):
        score_coreference(key, key, keep_singletons="no")
    with pytest.raises(FileNotFoundError):
        score_coreference("no/such/file.conll", key)


def test_repeated_response_mentions_are_dropped_up_to_the_reference_limit():
    key = doc([(0, 0, 1), (4, 4, 1), (2, 2, 2)])
    # The response gives "She" to two clusters: the first cluster (in file order) keeps it, as the reference does.
    once = score_coreference(key, doc([(0, 0, 1), (4, 4, 1), (2, 2, 2)]))
    repeated = score_coreference(key, doc([(0, 0, 1), (4, 4, 1), (2, 2, 2), (4, 4, 2)]))
    assert repeated == once
    # More than MAX_REPEATED_RESPONSE_MENTIONS repeats over the corpus: the reference scorer refuses to score.
    count = MAX_REPEATED_RESPONSE_MENTIONS + 1
    documents = [doc([(0, 0, 1), (4, 4, 1)], name=f"d{i}") for i in range(count)]
    responses = [doc([(0, 0, 1), (4, 4, 1), (4, 4, 2)], name=f"d{i}") for i in range(count)]
    score_coreference(documents[:-1], responses[:-1])
    with pytest.raises(ValueError, match=r"repeats 11 mentions of the key .* more than the 10"):
        score_coreference(documents, responses)


# ------------------------------------------------------------------------------------------------ LitBank
def perturbed(document: CorefDocument, rng: random.Random) -> CorefDocument:
    clusters = sorted({cluster for _, _, cluster in document.mentions})
    mentions = {}
    for start, end, cluster in document.mentions:
        choice = rng.random()
        if choice < 0.1:
            continue
        if choice < 0.2:
            cluster = rng.choice(clusters)
        elif choice < 0.25:
            end = min(end + 1, len(document.words) - 1)
        mentions.setdefault((start, end), (start, end, cluster))
    return CorefDocument(document.name, document.part, document.words, list(mentions.values()))


def test_litbank_scores_100_against_itself_and_less_against_a_perturbed_copy(shared_data):
    books = read_conll_coreference(shared_data / "litbank" / "conll")
    assert len(books) == 80
    start = time.perf_counter()
    perfect = score_coreference(books, books)
    response = [perturbed(book, random.Random(index)) for index, book in enumerate(books)]
    scores = score_coreference(books, response)
    elapsed = time.perf_counter() - start
    print(f"LitBank, 80 books: key against itself and against a perturbed response scored in {elapsed:.2f} s")
    assert perfect["conll_f1"] == 100.0
    assert all(perfect[metric] == {"recall": 100.0, "precision": 100.0, "f1": 100.0} for metric in CONLL_METRICS)
    for metric in CONLL_METRICS:
        assert 40 < scores[metric]["f1"] < 95, (metric, scores[metric])
    # Scoring the books one at a time and summing is what the corpus score does: scoring them together differs
    # from the mean of per-book F1.
    per_book = [score_coreference(book, answer)["muc"]["f1"] for book, answer in zip(books[:5], response[:5])]
    together = score_coreference(books[:5], response[:5])["muc"]["f1"]
    assert together != pytest.approx(sum(per_book) / 5, abs=1e-6)
