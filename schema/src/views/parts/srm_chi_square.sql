if(srm_k BETWEEN 2 AND 10 AND srm_n > 0,
        if(srm_df % 2 = 0,
            exp(-srm_x / 2) * (1 + (srm_df >= 4) * (srm_x / 2)
                + (srm_df >= 6) * pow(srm_x / 2, 2) / 2 + (srm_df >= 8) * pow(srm_x / 2, 3) / 6),
            erfc(sqrt(srm_x / 2)) + sqrt(2 / pi()) * exp(-srm_x / 2) * ((srm_df >= 3) * sqrt(srm_x)
                + (srm_df >= 5) * pow(srm_x, 1.5) / 3 + (srm_df >= 7) * pow(srm_x, 2.5) / 15
                + (srm_df >= 9) * pow(srm_x, 3.5) / 105)),
        NULL)
