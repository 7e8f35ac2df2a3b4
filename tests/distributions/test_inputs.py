"""MultivariateNormal's inputs: what each parameter and value takes (arrays, lists, Python
numbers), the dtype of the results, the checks that run first and their messages, `rng` and
`shape` of the sampling methods. References: SciPy's logpdf in float64."""

import re

import array_api_compat
import numpy as np
import pytest
import scipy.stats

from xpops.distributions import MultivariateNormal, kl_divergence

from .._support import backend_name, to_numpy

COV = np.array([[2.0, 0.5], [0.5, 1.0]])
REF = scipy.stats.multivariate_normal(np.zeros(2), COV)


def as_xp(xp, a, dtype="float64"):
    return xp.asarray(np.array(a, dtype=dtype))


# ---- lists and Python numbers for every array parameter (item 11) -----------------------------


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_every_parameter_takes_lists(param):
    matrix = {
        "covariance_matrix": COV,
        "precision_matrix": np.linalg.inv(COV),
        "scale_tril": np.linalg.cholesky(COV),
    }[param]
    for loc in ([0.0, 0.0], [0, 0], (0.0, 0.0), 0.0, 0):
        d = MultivariateNormal(loc, **{param: matrix.tolist()})
        assert isinstance(d.loc, np.ndarray)
        assert d.dtype == np.float64
        np.testing.assert_allclose(d.log_prob([1.0, -1.0]), REF.logpdf([1.0, -1.0]), rtol=1e-12)
        np.testing.assert_allclose(d.log_prob((1, -1)), REF.logpdf([1.0, -1.0]), rtol=1e-12)
    d = MultivariateNormal([0, 0], covariance_matrix=[[1, 0], [0, 1]])
    np.testing.assert_allclose(d.covariance_matrix, np.eye(2))
    one = MultivariateNormal(0.0, covariance_matrix=[[4.0]])  # D = 1, a number as a value
    np.testing.assert_allclose(one.log_prob([[1.0], [2.0]]), scipy.stats.norm(0, 2).logpdf([1, 2]))


def test_lists_follow_the_arrays_library(xp):
    """A list next to an array of a library becomes an array of that library."""
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=as_xp(xp, COV))
    assert backend_name(xp) == "numpy" or type(d.loc).__module__.split(".")[0] != "numpy"
    got = d.log_prob([[1.0, -1.0], [0.0, 0.5]])
    assert type(got) is type(d.loc)
    np.testing.assert_allclose(to_numpy(got), REF.logpdf([[1.0, -1.0], [0.0, 0.5]]), rtol=1e-12)
    lazy = MultivariateNormal(as_xp(xp, [0.0, 0.0]), covariance_matrix=COV.tolist())
    np.testing.assert_allclose(to_numpy(lazy.entropy()), REF.entropy(), rtol=1e-12)


# ---- a Python number does not promote (item 2) ------------------------------------------------


@pytest.mark.parametrize("loc", [0.0, 0, [0.0, 0.0], [0, 0]])
def test_python_numbers_do_not_promote(xp, loc):
    cov32 = as_xp(xp, COV, "float32")
    d = MultivariateNormal(loc, covariance_matrix=cov32)
    assert d.dtype == cov32.dtype
    for out in (d.loc, d.scale_tril, d.log_prob([1.0, 2.0]), d.entropy(), d.sample((3,), rng=0)):
        assert out.dtype == cov32.dtype
    loc32 = as_xp(xp, [0.0, 0.0], "float32")
    assert MultivariateNormal(loc32, covariance_matrix=COV.tolist()).dtype == loc32.dtype
    # two arrays promote as their library does
    assert MultivariateNormal(as_xp(xp, [0, 0]), covariance_matrix=cov32).dtype != cov32.dtype


# ---- values: complex, strings, None, ragged (items 1 and 12) ----------------------------------


@pytest.mark.parametrize("method", ["log_prob", "prob", "cdf", "logcdf"])
def test_complex_values_are_refused(xp, method):
    d = MultivariateNormal(as_xp(xp, [0.0, 0.0]), covariance_matrix=as_xp(xp, COV))
    call = getattr(d, method)
    bad = xp.asarray(np.array([1.0 + 2.0j, 0.0]))
    with pytest.raises(TypeError, match=r"`value` must hold real numbers, got dtype .*complex"):
        call(bad)
    with pytest.raises(TypeError, match=r"`value` must hold real numbers, got dtype .*complex"):
        call([1.0 + 2.0j, 0.0])
    if method in ("cdf", "logcdf"):
        with pytest.raises(TypeError, match="`lower_limit` must hold real numbers"):
            call(as_xp(xp, [1.0, 1.0]), lower_limit=bad)


@pytest.mark.parametrize("method", ["log_prob", "prob", "cdf", "logcdf"])
def test_values_that_are_not_numbers(method):
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=COV)
    call = getattr(d, method)
    with pytest.raises(TypeError, match=re.escape("`value` must be an array, got builtins.str")):
        call("ab")
    with pytest.raises(TypeError, match="`value` must be an array or a list of numbers, got None"):
        call(None)
    with pytest.raises(TypeError, match="`value` must hold real numbers, got dtype <U1"):
        call(["a", "b"])
    with pytest.raises(TypeError, match=r"`value` must be an array, got builtins.dict"):
        call({})
    with pytest.raises(ValueError, match="`value` could not be converted to an array"):
        call([[1.0, 2.0], [3.0]])


def test_complex_and_non_numeric_parameters():
    with pytest.raises(TypeError, match="`covariance_matrix` must hold real numbers, got dtype"):
        MultivariateNormal([0.0, 0.0], covariance_matrix=COV + 0j)
    with pytest.raises(TypeError, match=r"`loc` must hold real numbers, got dtype .*complex"):
        MultivariateNormal([0.0, 1j], covariance_matrix=COV)
    with pytest.raises(TypeError, match=re.escape("`loc` must be an array, got builtins.str")):
        MultivariateNormal("0", covariance_matrix=COV)
    with pytest.raises(TypeError, match="`loc` must be an array, a number or a list"):
        MultivariateNormal(None, covariance_matrix=COV)
    with pytest.raises(TypeError, match=re.escape("`scale_tril` must be an array, got")):
        MultivariateNormal(0.0, scale_tril="eye")
    with pytest.raises(ValueError, match="`precision_matrix` could not be converted"):
        MultivariateNormal(0.0, precision_matrix=[[1.0, 0.0], [0.0]])


# ---- sample: shape and rng (item 12) ----------------------------------------------------------


@pytest.mark.parametrize("chunks", [None, 2])
def test_sample_shape_errors(chunks):
    pytest.importorskip("dask") if chunks else None
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=COV)
    for shape in ((-1,), (3, -2), -1):
        with pytest.raises(ValueError, match="`shape` must hold non-negative sizes, got"):
            d.sample(shape, rng=0, chunks=chunks)
    for shape in ((2.5,), 2.5, True, (True,), "3", None):
        with pytest.raises(TypeError, match="`shape` must be an int or a tuple of ints, got"):
            d.sample(shape, rng=0, chunks=chunks)
    with pytest.raises(ValueError, match="`shape` must hold non-negative"):
        d.rsample((-1,))
    assert d.sample([2, 3], rng=0).shape == (2, 3, 2)
    assert d.sample(np.int64(4), rng=0).shape == (4, 2)


def test_rng_errors():
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=COV)
    for call in (d.sample, d.rsample, d.cdf):
        args = ([0.0, 0.0],) if call == d.cdf else ((2,),)
        with pytest.raises(ValueError, match="`rng` as an int seed must be non-negative, got -1"):
            call(*args, rng=-1)
        for rng in (True, np.bool_(False)):
            with pytest.raises(TypeError, match=r"`rng` must be None, an int seed .*bool"):
                call(*args, rng=rng)
        with pytest.raises(TypeError, match=r"`rng` must be None, an int seed .*str"):
            call(*args, rng="seed")


@pytest.mark.parametrize(
    "make",
    [
        lambda: 7,
        lambda: np.random.SeedSequence(7),
        lambda: [7, 8],
        lambda: np.random.PCG64(7),
        lambda: np.random.Philox(7),
        lambda: np.random.default_rng(7),
    ],
)
def test_rng_takes_what_default_rng_takes(make):
    """SPEC 7: every method that takes `rng` takes what ``numpy.random.default_rng`` does; the
    same source gives the draws ``default_rng`` of it gives."""
    d = MultivariateNormal([1.0, -1.0], covariance_matrix=COV)
    want = np.random.default_rng(make()).standard_normal((5, 2)) @ np.linalg.cholesky(COV).T
    np.testing.assert_allclose(d.sample(5, rng=make()), want + np.array([1.0, -1.0]), rtol=1e-12)
    np.testing.assert_allclose(d.rsample(5, rng=make()), want + np.array([1.0, -1.0]), rtol=1e-12)
    d3 = MultivariateNormal(np.zeros(3), covariance_matrix=np.eye(3) + 0.5)
    a = d3.cdf([0.5, 0.5, 0.5], rng=make(), return_error=True)
    b = d3.cdf([0.5, 0.5, 0.5], rng=make(), return_error=True)
    assert float(a[0]) == float(b[0])
    assert abs(float(a[0]) - scipy.stats.multivariate_normal(np.zeros(3), np.eye(3) + 0.5).cdf(
        [0.5, 0.5, 0.5]
    )) < 1e-4  # fmt: skip


def test_seed_sequence_with_chunks():
    pytest.importorskip("dask")
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=COV)
    a = d.sample((10,), rng=np.random.SeedSequence(3), chunks=4).compute()
    b = d.sample((10,), rng=np.random.SeedSequence(3), chunks=4).compute()
    np.testing.assert_array_equal(a, b)
    c = d.sample((10,), rng=np.random.SeedSequence(4), chunks=4).compute()
    assert not np.array_equal(a, c)
    e = d.sample((10,), rng=[3, 4], chunks=4).compute()
    np.testing.assert_array_equal(e, d.sample((10,), rng=(3, 4), chunks=4).compute())
    assert not np.array_equal(a, e)
    with pytest.raises(TypeError, match="with `chunks`, `rng` must be None, an int seed or a"):
        d.sample((10,), rng=np.random.PCG64(3), chunks=4)


# ---- devices (item 13) ------------------------------------------------------------------------


def test_loc_and_matrix_on_one_device():
    strict = pytest.importorskip("array_api_strict")
    other = strict.Device("device1")
    loc = strict.asarray([0.0, 0.0], device=other)
    with pytest.raises(ValueError, match=r"`loc` and `covariance_matrix` must be on the same dev"):
        MultivariateNormal(loc, covariance_matrix=strict.asarray(COV))
    with pytest.raises(ValueError, match=re.escape("got array_api_strict.Device('device1') and")):
        MultivariateNormal(loc, scale_tril=strict.eye(2))
    # a list goes to the device of the array beside it
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=strict.asarray(COV, device=other))
    assert d.loc.device == other
    assert d.log_prob([1.0, 1.0]).device == other


def test_mixed_libraries_stay_a_type_error():
    strict = pytest.importorskip("array_api_strict")
    with pytest.raises(TypeError, match="cannot be mixed"):
        MultivariateNormal(np.zeros(2), covariance_matrix=strict.asarray(COV))
    d = MultivariateNormal(np.zeros(2), covariance_matrix=COV)
    with pytest.raises(TypeError, match="`value` must be an array of the distribution's library"):
        d.log_prob(strict.asarray([0.0, 0.0]))
    q = MultivariateNormal(strict.zeros(2), covariance_matrix=strict.asarray(COV))
    with pytest.raises(TypeError, match="one array library"):
        kl_divergence(d, q)


def test_cupy_takes_a_seed_sequence(cupy_only):
    cupy = cupy_only
    for d in (2, 40):  # the fused kernels (D <= 32) and the generic path
        dist = MultivariateNormal(cupy.zeros(d), covariance_matrix=cupy.eye(d))
        a = dist.sample(5, rng=np.random.SeedSequence(1))
        assert cupy.array_equal(a, dist.sample(5, rng=np.random.SeedSequence(1)))
        assert not cupy.array_equal(a, dist.sample(5, rng=np.random.SeedSequence(2)))
        with pytest.raises(TypeError, match=r"cupy.random.Generator for CuPy, got numpy"):
            dist.sample(5, rng=np.random.PCG64(1))
        with pytest.raises(ValueError, match="`rng` as an int seed must be non-negative"):
            dist.sample(5, rng=-1)
        with pytest.raises(TypeError, match=r"cupy.random.Generator for CuPy, got builtins.bool"):
            dist.sample(5, rng=True)


# ---- float16, bfloat16, long double; validate_args=False (item 9) -----------------------------


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_low_precision_parameters_compute_in_float32(xp, param):
    """float16 (and bfloat16 where the library has it) parameters: the distribution computes in
    float32 and every result is float32, equal to the float32 distribution's."""
    names = [n for n in ("float16", "bfloat16") if hasattr(xp, n)]
    xp = array_api_compat.array_namespace(xp.zeros(1))  # astype of every library
    chol = np.linalg.cholesky(COV)
    matrix = {"covariance_matrix": COV, "precision_matrix": np.linalg.inv(COV), "scale_tril": chol}
    ref = MultivariateNormal(
        xp.asarray(np.zeros(2, np.float32)), **{param: xp.asarray(matrix[param].astype("f4"))}
    )
    for name in names:
        low = getattr(xp, name)
        for m in (xp.eye(2, dtype=low), xp.astype(xp.asarray(matrix[param]), low)):
            d = MultivariateNormal(xp.zeros(2, dtype=low), **{param: m})
            assert d.dtype == xp.float32
            v = xp.asarray(np.array([[0.5, -1.0], [0.0, 0.0]], np.float32))
            for out in (d.log_prob(v), d.prob(v), d.entropy(), d.sample(3, rng=0), d.scale_tril):
                assert out.dtype == xp.float32
        m = xp.astype(xp.asarray(matrix[param]), low)
        d = MultivariateNormal(xp.zeros(2, dtype=low), **{param: m})
        want = to_numpy(
            MultivariateNormal(
                xp.zeros(2, dtype=xp.float32), **{param: xp.astype(m, xp.float32)}
            ).log_prob(v)
        )
        np.testing.assert_allclose(to_numpy(d.log_prob(v)), want, rtol=1e-6)
        np.testing.assert_allclose(to_numpy(ref.log_prob(v)), want, rtol=1e-2)


def test_float16_against_scipy():
    d = MultivariateNormal(np.zeros(2, np.float16), covariance_matrix=np.eye(2, dtype=np.float16))
    assert d.dtype == np.float32
    v = np.array([[0.5, -1.0], [2.0, 0.0]], np.float16)
    got = d.log_prob(v)
    assert got.dtype == np.float32
    want = scipy.stats.multivariate_normal(np.zeros(2), np.eye(2)).logpdf(v.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(d.cdf(np.zeros(2)), 0.25, rtol=1e-6)


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 here")
@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_long_double_is_a_type_error(param):
    eye = np.eye(2, dtype=np.longdouble)
    name = np.dtype(np.longdouble).name
    with pytest.raises(TypeError, match=rf"`{param}` has dtype {name} \(long double\)"):
        MultivariateNormal([0.0, 0.0], **{param: eye})
    with pytest.raises(TypeError, match=rf"`loc` has dtype {name} \(long double\)"):
        MultivariateNormal(np.zeros(2, np.longdouble), **{param: np.eye(2)})


@pytest.mark.parametrize("param", ["covariance_matrix", "precision_matrix"])
def test_validate_args_false_says_the_factorization_failed(param):
    bad = [[1.0, 2.0], [2.0, 1.0]]
    with pytest.raises(ValueError, match=rf"the Cholesky factorization of `{param}` \(shape"):
        MultivariateNormal([0.0, 0.0], **{param: bad}, validate_args=False)
    with pytest.raises(ValueError, match=rf"`{param}` must be positive definite, got shape"):
        MultivariateNormal([0.0, 0.0], **{param: bad})


# ---- one 0-d result type on NumPy (item 14) ---------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3])
def test_numpy_results_of_one_point_are_0d_arrays(d):
    """The documented convention: a result of shape () is a 0-d numpy.ndarray in every method
    (NumPy's operations on 0-d arrays would give NumPy scalars)."""
    dist = MultivariateNormal(np.zeros(d), covariance_matrix=np.eye(d) + 0.2)
    x = np.full(d, 0.3)
    outs = {
        "log_prob": dist.log_prob(x),
        "prob": dist.prob(x),
        "log_prob(list)": dist.log_prob(x.tolist()),
        "entropy": dist.entropy(),
        "kl_divergence": dist.kl_divergence(dist),
        "kl_divergence()": kl_divergence(
            dist, MultivariateNormal(0.0, covariance_matrix=np.eye(d))
        ),
        "cdf": dist.cdf(x, rng=0),
        "logcdf": dist.logcdf(x, rng=0),
    }
    for name in ("cdf", "logcdf"):
        value, error = getattr(dist, name)(x, rng=0, return_error=True)
        outs[f"{name} value"], outs[f"{name} error"] = value, error
    for name, out in outs.items():
        assert type(out) is np.ndarray, name
        assert out.shape == (), name
        assert out.dtype == np.float64, name
    np.testing.assert_allclose(
        outs["log_prob"], scipy.stats.multivariate_normal(np.zeros(d), np.eye(d) + 0.2).logpdf(x)
    )
    batched = MultivariateNormal(np.zeros((2, d)), covariance_matrix=np.eye(d))
    for out in (batched.log_prob(x), batched.entropy(), batched.cdf(x, rng=0)):
        assert type(out) is np.ndarray
        assert out.shape == (2,)
