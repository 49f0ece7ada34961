
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of characters that are digits: random tiny models get a spread of rewards."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)
