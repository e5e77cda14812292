"""ISO 4217 currency codes and their minor units (decimal places).

Shipped as data so no dependency is needed. The table holds the active
codes that have a minor unit (ISO 4217 List One as published in 2025);
codes whose minor unit is "N.A." (gold, SDRs, the test code ``XTS``, ``XXX``)
are left out, because an amount in them has no integer minor unit.
"""

from __future__ import annotations

__all__ = ["MINOR_UNITS"]

_BY_SCALE = {
    0: "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF",
    2: (
        "AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV "
        "BRL BSD BTN BWP BYN BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK "
        "DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL "
        "HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL "
        "MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO "
        "NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK "
        "SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS "
        "UAH USD USN UYU UZS VED VES WST XCD XCG YER ZAR ZMW ZWG"
    ),
    3: "BHD IQD JOD KWD LYD OMR TND",
    4: "CLF UYW",
}

MINOR_UNITS: dict[str, int] = {
    code: scale for scale, codes in _BY_SCALE.items() for code in codes.split()
}
"""Currency code -> number of decimal places of its minor unit."""
